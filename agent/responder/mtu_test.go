package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// TestRepliesCrossMTU1280Unfragmented has the agent of the fullest reply answer a ccm
// over real UDP through links of MTU 1280, the IPv6 minimum, in both families. The
// agent's socket may not fragment (IP_PMTUDISC_DO, IPV6_DONTFRAG): a reply longer than
// the path takes fails to send. Every reply must go, the ccm's kernel must reassemble
// nothing, and the ccm must gather every cover and pool from successive replies.
func TestRepliesCrossMTU1280Unfragmented(t *testing.T) {
	n := netns.ForTest(t, 2)
	agent, ccm := n.Nodes[0], n.Nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range []*netns.Host{agent, ccm} {
		// Both ends of each veth: the bridge takes its ports' smallest MTU.
		if _, err := h.Run(ctx, "ip", "link", "set", h.Interface, "mtu", "1280"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Bridge.Run(ctx, "ip", "link", "set", h.Label, "mtu", "1280"); err != nil {
			t.Fatal(err)
		}
	}
	for _, family := range []struct {
		name      string
		agent     netip.Addr
		ccm       netip.Addr
		reassembl func(*testing.T, *netns.Host) int
	}{
		{"IPv4", agent.IPv4, ccm.IPv4, reassembled4},
		{"IPv6", agent.IPv6, ccm.IPv6, reassembled6},
	} {
		t.Run(family.name, func(t *testing.T) {
			r, tags, unable := maxedResponder(t, 300)
			agentConn := listenUDP(t, agent, family.agent, true)
			ccmConn := listenUDP(t, ccm, family.ccm, false)
			before := family.reassembl(t, ccm)
			covers, cannot := probe.NewCoverGather(), probe.NewUnableGather()
			in := make([]byte, probe.MaxDatagram)
			for c := uint64(1); !covers.Whole() || !cannot.Whole(); c++ {
				if c > 100 {
					t.Fatalf("lists not whole after %d replies", c-1)
				}
				req := testKey.AppendRequest(nil, probe.Request{Nonce: c, Sender: probe.FromCCM, Instance: 1, Counter: c, To: r.tag})
				if _, err := ccmConn.WriteTo(req, agentConn.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				if err := agentConn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
					t.Fatal(err)
				}
				k, from, err := agentConn.ReadFrom(in)
				if err != nil {
					t.Fatalf("request %d: %v", c, err)
				}
				out, ok := r.Handle(in[:k], nil)
				if !ok {
					t.Fatalf("request %d unanswered", c)
				}
				if _, err := agentConn.WriteTo(out, from); err != nil {
					t.Fatalf("reply %d of %d bytes does not leave unfragmented: %v", c, len(out), err)
				}
				if err := ccmConn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
					t.Fatal(err)
				}
				k, _, err = ccmConn.ReadFrom(in)
				if err != nil {
					t.Fatalf("reply %d: %v", c, err)
				}
				reply, err := testKey.ParseReply(in[:k])
				if err != nil || reply.Nonce != c {
					t.Fatalf("reply %d: nonce %d, %v", c, reply.Nonce, err)
				}
				covers.Take(reply.Covers, reply.CoverSum)
				cannot.Take(reply.Unable, reply.UnableSum)
			}
			if !slices.Equal(covers.Items(), tags) || !slices.Equal(cannot.Items(), unable) {
				t.Errorf("gathered %d covers and %d unable entries, want %d and %d", len(covers.Items()), len(cannot.Items()), len(tags), len(unable))
			}
			if after := family.reassembl(t, ccm); after != before {
				t.Errorf("the ccm's kernel reassembled %d datagrams", after-before)
			}
		})
	}
}

// listenUDP opens a UDP socket on addr inside h; with dontFragment, what it sends longer
// than the path's MTU fails instead of going in fragments.
func listenUDP(t *testing.T, h *netns.Host, addr netip.Addr, dontFragment bool) net.PacketConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		if !dontFragment {
			return nil
		}
		var err error
		if cerr := c.Control(func(fd uintptr) {
			if strings.HasSuffix(network, "6") {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
			} else {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	var conn net.PacketConn
	if err := h.Do(func() error {
		var err error
		conn, err = lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// reassembled4 and reassembled6 return how many datagrams h's kernel has had to
// reassemble from fragments, in each family.
func reassembled4(t *testing.T, h *netns.Host) int {
	return snmpCounter(t, h, "/proc/net/snmp", "Ip:", "ReasmReqds")
}

func reassembled6(t *testing.T, h *netns.Host) int {
	return snmpCounter(t, h, "/proc/net/snmp6", "", "Ip6ReasmReqds")
}

// snmpCounter reads a counter of h's network namespace from file: in the two-line form
// of /proc/net/snmp (a line of names, then one of values, both starting with prefix), or
// the name and value lines of /proc/net/snmp6 when prefix is empty.
func snmpCounter(t *testing.T, h *netns.Host, file, prefix, name string) int {
	t.Helper()
	out, err := h.Run(context.Background(), "cat", file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if prefix == "" && len(f) == 2 && f[0] == name {
			v, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if prefix == "" || len(f) == 0 || f[0] != prefix || i+1 >= len(lines) {
			continue
		}
		if at := slices.Index(f, name); at > 0 {
			values := strings.Fields(lines[i+1])
			if at < len(values) {
				v, err := strconv.Atoi(values[at])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatalf("no %s in %s of %s", name, file, h.Name)
	return 0
}
