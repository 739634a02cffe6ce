package l2

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// filtered reports whether the kernel filter prog lets frame through to user space, as
// the kernel runs it.
func filtered(t *testing.T, prog []bpf.RawInstruction, frame []byte) bool {
	t.Helper()
	insns, ok := bpf.Disassemble(prog)
	if !ok {
		t.Fatal("the filter has instructions bpf cannot disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	n, err := vm.Run(frame)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

var (
	pool4 = iprange.Range{First: netip.MustParseAddr("198.18.0.10"), Last: netip.MustParseAddr("198.18.0.19")}
	pool6 = iprange.FromPrefix(netip.MustParsePrefix("fd00:198:18::/120"))
)

func TestARPFilter(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	reply := func(spa string) []byte {
		f := arpRequest(t, ourMAC, peerMAC, spa, "198.18.0.200")
		f[21] = 2
		return f
	}
	ipv6 := nsFrame(t, multicastMAC(solicitedNode(vip6)), netip.MustParseAddr("fe80::c8"), solicitedNode(vip6), vip6, 255)
	many := make([]iprange.Range, maxFilterRanges+1)
	for i := range many {
		many[i] = iprange.FromPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 0}), 24))
	}
	for _, tc := range []struct {
		name   string
		ranges []iprange.Range
		frame  []byte
		keep   bool
	}{
		{"broadcast request", nil, arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10"), true},
		// Whose address it asks for is the responder's to decide, as it changes.
		{"request for any address", nil, arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.99"), true},
		{"probe (RFC 5227, sender 0.0.0.0)", nil, arpRequest(t, bcast, peerMAC, "0.0.0.0", "198.18.0.10"), true},
		{"announcement, no pools", nil, GratuitousARP(peerMAC, vip4), false},
		{"reply, no pools", nil, reply("198.18.0.10"), false},
		{"announcement of a pool's address", []iprange.Range{pool6, pool4}, GratuitousARP(peerMAC, vip4), true},
		{"announcement of the pool's last address", []iprange.Range{pool4}, GratuitousARP(peerMAC, pool4.Last), true},
		{"announcement past the pool's end", []iprange.Range{pool4}, GratuitousARP(peerMAC, pool4.Last.Next()), false},
		{"announcement before the pool", []iprange.Range{pool4}, GratuitousARP(peerMAC, pool4.First.Prev()), false},
		{"reply from a pool's address", []iprange.Range{pool4}, reply("198.18.0.10"), true},
		{"reply from another address", []iprange.Range{pool4}, reply("198.18.0.200"), false},
		{"announcement, too many pools to test", many, GratuitousARP(peerMAC, vip4), true},
		{"truncated request", nil, arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10")[:40], false},
		{"not ARP", []iprange.Range{pool4}, ipv6, false},
	} {
		if got := filtered(t, arpFilter(tc.ranges, true), tc.frame); got != tc.keep {
			t.Errorf("%s: let through = %v, want %v", tc.name, got, tc.keep)
		}
	}
}

func TestNDPFilter(t *testing.T) {
	group := solicitedNode(vip6)
	ns := nsFrame(t, multicastMAC(group), netip.MustParseAddr("fe80::c8"), group, vip6, 255)
	na := func(target string) []byte {
		return UnsolicitedNA(peerMAC, netip.MustParseAddr("fe80::c8"), netip.MustParseAddr(target))
	}
	odd := iprange.Range{First: netip.MustParseAddr("fd00:198:18::1:7"), Last: netip.MustParseAddr("fd00:198:18::1:9")}
	for _, tc := range []struct {
		name   string
		ranges []iprange.Range
		frame  []byte
		keep   bool
	}{
		{"solicitation", nil, ns, true},
		{"duplicate address detection (from ::)", nil, nsFrame(t, multicastMAC(group), netip.IPv6Unspecified(), group, vip6, 255), true},
		{"advertisement, no pools", nil, na("fd00:198:18::10"), false},
		{"advertisement of a pool's address", []iprange.Range{pool4, pool6}, na("fd00:198:18::10"), true},
		{"advertisement outside the pool", []iprange.Range{pool6}, na("fd00:198:18::1:10"), false},
		{"advertisement of another /64", []iprange.Range{pool6}, na("fd00:198:19::10"), false},
		// Ranges are tested by their covering prefix: fd00:198:18::1:0/124 here.
		{"advertisement inside a range", []iprange.Range{odd}, na("fd00:198:18::1:8"), true},
		{"advertisement outside a range's prefix", []iprange.Range{odd}, na("fd00:198:18::1:10"), false},
		{"ARP", []iprange.Range{pool6}, GratuitousARP(peerMAC, vip4), false},
	} {
		if got := filtered(t, ndpFilter(tc.ranges, true), tc.frame); got != tc.keep {
			t.Errorf("%s: let through = %v, want %v", tc.name, got, tc.keep)
		}
	}
}

func TestCovering(t *testing.T) {
	for _, tc := range []struct{ first, last, want string }{
		{"fd00::", "fd00::ff", "fd00::/120"},
		{"fd00::1:7", "fd00::1:9", "fd00::1:0/124"},
		{"fd00::5", "fd00::5", "fd00::5/128"},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/0"},
	} {
		r := iprange.Range{First: netip.MustParseAddr(tc.first), Last: netip.MustParseAddr(tc.last)}
		if got := covering(r); got.String() != tc.want {
			t.Errorf("covering(%s) = %s, want %s", r, got, tc.want)
		}
	}
}
