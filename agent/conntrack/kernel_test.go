package conntrack

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// Bits of an entry's status, with those of the package.
const (
	statusAssured   = 1 << 2
	statusConfirmed = 1 << 3
	// answered is an answered entry's: a reply seen, the connection assured.
	answered = statusSeenReply | statusAssured
)

// create adds to the connection tracking of the calling thread's namespace a TCP entry
// from the client's port to dst:8080, answered from replySrc:8080, in TCP state state,
// with status bits status.
func create(port uint16, dst, replySrc netip.Addr, state uint8, status uint32) error {
	family, client := uint8(unix.AF_INET), netip.MustParseAddr("198.18.0.200")
	ipSrc, ipDst := nl.CTA_IP_V4_SRC, nl.CTA_IP_V4_DST
	if dst.Is6() {
		family, client = unix.AF_INET6, netip.MustParseAddr("fd00:198:18::200")
		ipSrc, ipDst = nl.CTA_IP_V6_SRC, nl.CTA_IP_V6_DST
	}
	tuple := func(typ int, src, dst netip.Addr, sport, dport uint16) *nl.RtAttr {
		t := nl.NewRtAttr(unix.NLA_F_NESTED|typ, nil)
		ip := t.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_IP, nil)
		ip.AddRtAttr(ipSrc, src.AsSlice())
		ip.AddRtAttr(ipDst, dst.AsSlice())
		p := t.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_PROTO, nil)
		p.AddRtAttr(nl.CTA_PROTO_NUM, []byte{unix.IPPROTO_TCP})
		p.AddRtAttr(nl.CTA_PROTO_SRC_PORT, nl.BEUint16Attr(sport))
		p.AddRtAttr(nl.CTA_PROTO_DST_PORT, nl.BEUint16Attr(dport))
		return t
	}
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|nl.IPCTNL_MSG_CT_NEW, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	req.AddData(tuple(nl.CTA_TUPLE_ORIG, client, dst, port, 8080))
	req.AddData(tuple(nl.CTA_TUPLE_REPLY, replySrc, client, 8080, port))
	// Confirmed, as the kernel makes an entry it is given: a status without it is refused.
	req.AddData(nl.NewRtAttr(nl.CTA_STATUS, nl.BEUint32Attr(status|statusConfirmed)))
	req.AddData(nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(600)))
	info := nl.NewRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO, nil)
	info.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO_TCP, nil).AddRtAttr(nl.CTA_PROTOINFO_TCP_STATE, []byte{state})
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return fmt.Errorf("create the entry of port %d to %s, reply from %s: %w", port, dst, replySrc, err)
	}
	return nil
}

// ports lists the client ports of the entries of family in the calling thread's
// namespace.
func ports(family netlink.InetFamily) ([]uint16, error) {
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, family)
	var ps []uint16
	for _, f := range flows {
		ps = append(ps, f.Forward.SrcPort)
	}
	return ps, err
}

// TestSweepKernel clears stale entries from a real kernel's connection tracking, in a
// node's namespace, and leaves the translated, the answered and other addresses' ones.
func TestSweepKernel(t *testing.T) {
	node := netns.ForTest(t, 1).Nodes[0]
	entries := []struct {
		name          string
		dst, replySrc string
		state         uint8
		status        uint32
		stale         bool
	}{
		{"stale", "198.18.0.100", "198.18.0.100", nl.TCP_CONNTRACK_SYN_SENT, 0, true},
		{"stale IPv6", "fd00:198:18::100", "fd00:198:18::100", nl.TCP_CONNTRACK_SYN_SENT, 0, true},
		{"translated", "198.18.0.100", "198.19.3.2", nl.TCP_CONNTRACK_SYN_SENT, 0, false},
		{"translated IPv6", "fd00:198:18::100", "fd00:198:19:3::2", nl.TCP_CONNTRACK_SYN_SENT, 0, false},
		{"answered", "198.18.0.100", "198.18.0.100", nl.TCP_CONNTRACK_ESTABLISHED, answered, false},
		{"other address", "198.18.0.101", "198.18.0.101", nl.TCP_CONNTRACK_SYN_SENT, 0, false},
		{"other address IPv6", "fd00:198:18::101", "fd00:198:18::101", nl.TCP_CONNTRACK_SYN_SENT, 0, false},
	}
	var want, left []string
	s := NewSweeper(Kernel{})
	s.Gained([]netip.Addr{v4, v6})
	err := node.Do(func() error {
		for i, e := range entries {
			if err := create(uint16(40000+i), netip.MustParseAddr(e.dst), netip.MustParseAddr(e.replySrc), e.state, e.status); err != nil {
				return err
			}
			if !e.stale {
				want = append(want, e.name)
			}
		}
		s.sweepDue(time.Now().Add(firstSweep))
		for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			ps, err := ports(family)
			if err != nil {
				return err
			}
			for _, p := range ps {
				left = append(left, entries[p-40000].name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("entries left: %v, want %v", left, want)
	}
}

// TestUnansweredKernelFilter: the kernel's dump holds only the entries with no reply seen
// (Linux 5.19 and later filter so), and Unanswered reads each entry's fields as the kernel
// has them.
func TestUnansweredKernelFilter(t *testing.T) {
	node := netns.ForTest(t, 1).Nodes[0]
	vip := netip.MustParseAddr("198.18.0.100")
	var got []Entry
	if err := node.Do(func() error {
		if err := create(40000, vip, vip, nl.TCP_CONNTRACK_SYN_SENT, 0); err != nil {
			return err
		}
		if err := create(40001, vip, netip.MustParseAddr("198.19.3.2"), nl.TCP_CONNTRACK_ESTABLISHED, answered); err != nil {
			return err
		}
		return Kernel{}.Unanswered(iprange.IPv4, func(e Entry) { got = append(got, e) })
	}); err != nil {
		t.Fatal(err)
	}
	want := Entry{
		Proto:    unix.IPPROTO_TCP,
		Dst:      netip.AddrPortFrom(vip, 8080),
		ReplySrc: netip.AddrPortFrom(vip, 8080),
		TCPState: nl.TCP_CONNTRACK_SYN_SENT,
	}
	if len(got) != 1 {
		t.Fatalf("Unanswered gave %d entries, want the unanswered one: %+v", len(got), got)
	}
	got[0].Status &= statusSeenReply | statusDstNAT
	if !equalEntries(got[0], want) {
		t.Errorf("Unanswered gave %+v, want %+v", got[0], want)
	}
}

func equalEntries(a, b Entry) bool {
	return a.Proto == b.Proto && a.Dst == b.Dst && a.ReplySrc == b.ReplySrc && a.TCPState == b.TCPState && a.Status == b.Status
}

// BenchmarkSweep is one pass over a node's connection tracking of 100,000 answered,
// translated entries, none of them stale: the cost of each sweep on a busy node.
func BenchmarkSweep(b *testing.B) {
	const entries = 100_000
	node := netns.ForTest(b, 1).Nodes[0]
	s := NewSweeper(Kernel{})
	addrs := map[netip.Addr]bool{v4: true}
	if err := node.Do(func() error {
		for i := range entries {
			// Every client port to each of a few Services, each with its pod.
			port, svc := uint16(1+i%60000), byte(i/60000)
			if err := create(port, netip.AddrFrom4([4]byte{198, 18, 1, svc}), netip.AddrFrom4([4]byte{198, 19, 3, svc}), nl.TCP_CONNTRACK_ESTABLISHED, answered); err != nil {
				return err
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := s.sweep(iprange.IPv4, addrs, map[netip.Addr]int{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}
