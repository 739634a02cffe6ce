package l2

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/mdlayher/ndp"
)

// tagged returns frame with an 802.1Q tag of VLAN 10 after its addresses.
func tagged(frame []byte) []byte {
	return slices.Concat(frame[:12], []byte{0x81, 0x00, 0x00, 0x0a}, frame[12:])
}

// withNS returns a solicitation frame as nsFrame builds it, changed by edit, with the
// ICMPv6 checksum made right again: only what edit changed is wrong.
func withNS(t *testing.T, frame []byte, edit func(icmp []byte)) []byte {
	t.Helper()
	ip := frame[14:]
	icmp := ip[ipv6HeaderLen:]
	edit(icmp)
	binary.BigEndian.PutUint16(icmp[2:4], 0)
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	binary.BigEndian.PutUint16(icmp[2:4], icmpv6Checksum(src, dst, icmp))
	return frame
}

// TestStrictARP checks that requests the responder was not written for get no answer,
// even for an owned address: ARP of another hardware or protocol, and tagged frames
// (the reply would leave untagged, on another VLAN).
func TestStrictARP(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	request := func() []byte { return arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10") }
	set := func(b []byte, off int, v ...byte) []byte { copy(b[off:], v); return b }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Drop
	}{
		{"hardware type IEEE 802", set(request(), 14, 0x00, 0x06), NotEthernetARP},
		{"hardware address length 8", append(set(request(), 18, 8), make([]byte, 18)...), NotEthernetARP},
		{"protocol type IPv6", set(request(), 16, 0x86, 0xdd), NotEthernetARP},
		{"VLAN-tagged", tagged(request()), VLANTagged},
	} {
		if _, why := ARPReply(tc.frame, ourMAC, owns(vip4)); why != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, why, tc.want)
		}
	}
}

// TestStrictNDP checks that solicitations RFC 4861 (7.1.1) says to drop get no answer,
// even for an owned address, and so do tagged ones.
func TestStrictNDP(t *testing.T) {
	peer := netip.MustParseAddr("fd00:198:18::c8")
	group := solicitedNode(vip6)
	groupMAC := multicastMAC(group)
	ns := func() []byte { return nsFrame(t, groupMAC, peer, group, vip6, 255) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Drop
	}{
		{"bad checksum", func() []byte { f := ns(); f[14+ipv6HeaderLen+3] ^= 0xff; return f }(), BadChecksum},
		{"ICMPv6 code 1", withNS(t, ns(), func(icmp []byte) { icmp[1] = 1 }), BadCode},
		{"multicast source", nsFrame(t, groupMAC, netip.MustParseAddr("ff02::1"), group, vip6, 255), MulticastSource},
		{"duplicate address detection with a source link-layer address", nsFrameOptions(t, groupMAC, netip.IPv6Unspecified(), group, vip6,
			[]ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: peerMAC}}), DADWithSourceLinkLayer},
		{"VLAN-tagged", tagged(ns()), VLANTagged},
	} {
		if _, why := NDPReply(tc.frame, ourMAC, ourLL, owns(vip6)); why != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, why, tc.want)
		}
	}
}
