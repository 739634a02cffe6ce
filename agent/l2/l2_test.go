package l2

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/mdlayher/ndp"
)

var (
	ourMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	peerMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xc8}
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	ourLL    = netip.MustParseAddr("fe80::1")
	vip4     = netip.MustParseAddr("198.18.0.10")
	vip6     = netip.MustParseAddr("fd00:198:18::10")
)

func owns(addrs ...netip.Addr) func(netip.Addr) bool {
	return func(a netip.Addr) bool {
		for _, b := range addrs {
			if a == b {
				return true
			}
		}
		return false
	}
}

// unhex reads bytes written as hex with spaces and newlines between groups.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGratuitousARPBytes(t *testing.T) {
	want := unhex(t, `
		ffffffffffff 020000000001 0806
		0001 0800 06 04 0001
		020000000001 c612000a
		000000000000 c612000a
		000000000000000000000000000000000000`) // padding to the 60-byte minimum
	if got := GratuitousARP(ourMAC, vip4); !bytes.Equal(got, want) {
		t.Errorf("GratuitousARP =\n% x\nwant\n% x", got, want)
	}
}

func TestUnsolicitedNABytes(t *testing.T) {
	icmp := unhex(t, `
		88 00 0000
		20000000
		fd000198001800000000000000000010
		02 01 020000000001`)
	binary.BigEndian.PutUint16(icmp[2:4], icmpv6Checksum(ourLL, allNodes, icmp))
	want := append(unhex(t, `
		333300000001 020000000001 86dd
		60000000 0020 3a ff
		fe800000000000000000000000000001
		ff020000000000000000000000000001`), icmp...)
	if got := UnsolicitedNA(ourMAC, ourLL, vip6); !bytes.Equal(got, want) {
		t.Errorf("UnsolicitedNA =\n% x\nwant\n% x", got, want)
	}
}

func arpRequest(t *testing.T, dst, sha net.HardwareAddr, spa, tpa string) []byte {
	return unhex(t, hex.EncodeToString(dst)+hex.EncodeToString(sha)+"0806"+
		"0001 0800 06 04 0001"+hex.EncodeToString(sha)+hex.EncodeToString(netip.MustParseAddr(spa).AsSlice())+
		"000000000000"+hex.EncodeToString(netip.MustParseAddr(tpa).AsSlice()))
}

func TestARPReply(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	wantReply := unhex(t, `
		0200000000c8 020000000001 0806
		0001 0800 06 04 0002
		020000000001 c612000a
		0200000000c8 c61200c8
		000000000000000000000000000000000000`)
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Drop
	}{
		{"broadcast request", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10"), Answered},
		{"unicast to us", arpRequest(t, ourMAC, peerMAC, "198.18.0.200", "198.18.0.10"), Answered},
		{"flooded to another host", arpRequest(t, otherMAC, peerMAC, "198.18.0.200", "198.18.0.10"), NotForUs},
		{"address not owned", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.11"), NotOwned},
		{"someone else's announcement", arpRequest(t, bcast, peerMAC, "198.18.0.10", "198.18.0.10"), Announcement},
		{"truncated", arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10")[:30], Malformed},
	} {
		got, why := ARPReply(tc.frame, ourMAC, owns(vip4))
		if why != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, why, tc.want)
			continue
		}
		if why == Answered && !bytes.Equal(got, wantReply) {
			t.Errorf("%s: reply =\n% x\nwant\n% x", tc.name, got, wantReply)
		}
	}
	reply := arpRequest(t, ourMAC, peerMAC, "198.18.0.200", "198.18.0.10")
	reply[21] = 2 // operation: reply
	if _, why := ARPReply(reply, ourMAC, owns(vip4)); why != NotRequest {
		t.Errorf("an ARP reply: %v, want NotRequest", why)
	}
}

// nsFrame builds a neighbour solicitation as a client kernel sends it.
func nsFrame(t *testing.T, dstMAC net.HardwareAddr, src, dst, target netip.Addr, hopLimit byte) []byte {
	t.Helper()
	var options []ndp.Option
	if !src.IsUnspecified() {
		options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: peerMAC}}
	}
	return nsFrameWith(t, dstMAC, src, dst, target, hopLimit, options)
}

// nsFrameOptions builds a neighbour solicitation from the link with the options given.
func nsFrameOptions(t *testing.T, dstMAC net.HardwareAddr, src, dst, target netip.Addr, options []ndp.Option) []byte {
	t.Helper()
	return nsFrameWith(t, dstMAC, src, dst, target, 255, options)
}

func nsFrameWith(t *testing.T, dstMAC net.HardwareAddr, src, dst, target netip.Addr, hopLimit byte, options []ndp.Option) []byte {
	t.Helper()
	ns := &ndp.NeighborSolicitation{TargetAddress: target, Options: options}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	s, d := src.As16(), dst.As16()
	b := append([]byte{}, dstMAC...)
	b = append(b, peerMAC...)
	b = append(b, 0x86, 0xdd, 0x60, 0, 0, 0, 0, byte(len(icmp)), 58, hopLimit)
	b = append(append(append(b, s[:]...), d[:]...), icmp...)
	return b
}

func TestNDPReply(t *testing.T) {
	peer := netip.MustParseAddr("fd00:198:18::c8")
	group := netip.MustParseAddr("ff02::1:ff00:10")
	groupMAC := net.HardwareAddr{0x33, 0x33, 0xff, 0x00, 0x00, 0x10}
	for _, tc := range []struct {
		name      string
		frame     []byte
		want      Drop
		to        netip.Addr
		toMAC     net.HardwareAddr
		solicited bool
	}{
		{"multicast", nsFrame(t, groupMAC, peer, group, vip6, 255), Answered, peer, peerMAC, true},
		{"unicast to us", nsFrame(t, ourMAC, peer, vip6, vip6, 255), Answered, peer, peerMAC, true},
		{"duplicate address detection", nsFrame(t, groupMAC, netip.IPv6Unspecified(), group, vip6, 255), Answered, allNodes, multicastMAC(allNodes), false},
		{"flooded to another host", nsFrame(t, otherMAC, peer, vip6, vip6, 255), NotForUs, netip.Addr{}, nil, false},
		{"address not owned", nsFrame(t, ourMAC, peer, group, netip.MustParseAddr("fd00:198:18::11"), 255), NotOwned, netip.Addr{}, nil, false},
		{"hop limit below 255: not from this link", nsFrame(t, groupMAC, peer, group, vip6, 254), NotFromLink, netip.Addr{}, nil, false},
		{"truncated", nsFrame(t, groupMAC, peer, group, vip6, 255)[:70], Malformed, netip.Addr{}, nil, false},
	} {
		got, why := NDPReply(tc.frame, ourMAC, ourLL, owns(vip6))
		if why != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, why, tc.want)
			continue
		}
		if why != Answered {
			continue
		}
		want := naFrame(tc.toMAC, ourMAC, ourLL, tc.to, vip6, tc.solicited)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: reply =\n% x\nwant\n% x", tc.name, got, want)
		}
		// Decode what was sent, independently of naFrame: addresses, hop limit, flags.
		if !bytes.Equal(got[0:6], tc.toMAC) || got[14+7] != 255 || netip.AddrFrom16([16]byte(got[14+24:14+40])) != tc.to {
			t.Errorf("%s: reply headers wrong: % x", tc.name, got[:54])
		}
		m, err := ndp.ParseMessage(got[54:])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		na := m.(*ndp.NeighborAdvertisement)
		if na.TargetAddress != vip6 || !na.Override || na.Solicited != tc.solicited || na.Router {
			t.Errorf("%s: advertisement %+v", tc.name, na)
		}
		if c := binary.BigEndian.Uint16(got[56:58]); icmpv6Checksum(ourLL, tc.to, append(append([]byte{}, got[54:56]...), append([]byte{0, 0}, got[58:]...)...)) != c {
			t.Errorf("%s: bad ICMPv6 checksum %#04x", tc.name, c)
		}
	}
}

func TestMulticastMAC(t *testing.T) {
	if got := multicastMAC(solicitedNode(netip.MustParseAddr("fd00::12:3456"))); got.String() != "33:33:ff:12:34:56" {
		t.Errorf("solicited-node MAC = %s", got)
	}
}
