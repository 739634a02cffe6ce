package l2

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"
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

func TestRequestFilter(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	reply := arpRequest(t, ourMAC, peerMAC, "198.18.0.200", "198.18.0.10")
	reply[21] = 2
	ipv6 := nsFrame(t, multicastMAC(solicitedNode(vip6)), netip.MustParseAddr("fe80::c8"), solicitedNode(vip6), vip6, 255)
	for _, tc := range []struct {
		name  string
		frame []byte
		keep  bool
	}{
		{"broadcast request", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10"), true},
		// Whose address it asks for is the responder's to decide, as it changes.
		{"request for any address", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.99"), true},
		{"probe (RFC 5227, sender 0.0.0.0)", arpRequest(t, bcast, peerMAC, "0.0.0.0", "198.18.0.10"), true},
		{"announcement", GratuitousARP(peerMAC, vip4), false},
		{"reply", reply, false},
		{"truncated request", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10")[:40], false},
		{"not ARP", ipv6, false},
	} {
		if got := filtered(t, requestFilter, tc.frame); got != tc.keep {
			t.Errorf("%s: let through = %v, want %v", tc.name, got, tc.keep)
		}
	}
}

func TestNSFilter(t *testing.T) {
	group := solicitedNode(vip6)
	ns := nsFrame(t, multicastMAC(group), netip.MustParseAddr("fe80::c8"), group, vip6, 255)
	na := UnsolicitedNA(peerMAC, netip.MustParseAddr("fe80::c8"), vip6)
	for _, tc := range []struct {
		name  string
		frame []byte
		keep  bool
	}{
		{"solicitation", ns, true},
		{"duplicate address detection (from ::)", nsFrame(t, multicastMAC(group), netip.IPv6Unspecified(), group, vip6, 255), true},
		{"advertisement", na, false},
		{"ARP", GratuitousARP(peerMAC, vip4), false},
	} {
		if got := filtered(t, nsFilter, tc.frame); got != tc.keep {
			t.Errorf("%s: let through = %v, want %v", tc.name, got, tc.keep)
		}
	}
}
