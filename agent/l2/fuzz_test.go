package l2

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/ndp"
)

// FuzzARPReply checks that no frame makes ARPReply panic, that every frame gets an answer
// or a known reason, and that an answer is a reply from us about an owned address, sent
// to the asker.
func FuzzARPReply(f *testing.F) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	t := &testing.T{}
	request := arpRequest(t, bcast, peerMAC, "198.18.0.200", "198.18.0.10")
	f.Add(request)
	f.Add(arpRequest(t, ourMAC, peerMAC, "0.0.0.0", "198.18.0.10"))
	f.Add(arpRequest(t, bcast, peerMAC, "198.18.0.10", "198.18.0.10"))
	f.Add(tagged(request))
	f.Add(request[:30])
	f.Add(GratuitousARP(peerMAC, vip4))
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, why := ARPReply(frame, ourMAC, owns(vip4))
		if why >= Drop(len(dropNames)) {
			t.Fatalf("unknown drop reason %d for % x", why, frame)
		}
		if why != Answered {
			return
		}
		req, _ := ARPReply(frame, ourMAC, func(netip.Addr) bool { return true })
		if !bytes.Equal(reply, req) || !bytes.Equal(reply[6:12], ourMAC) || !bytes.Equal(reply[22:28], ourMAC) ||
			netip.AddrFrom4([4]byte(reply[28:32])) != vip4 {
			t.Fatalf("reply % x to % x is not ours about %s", reply, frame, vip4)
		}
	})
}

// FuzzNDPReply checks that no frame makes NDPReply panic, that every frame gets an answer
// or a known reason, and that an answer is an advertisement of an owned address that
// parses and whose checksum checks.
func FuzzNDPReply(f *testing.F) {
	t := &testing.T{}
	peer := netip.MustParseAddr("fd00:198:18::c8")
	group := solicitedNode(vip6)
	ns := nsFrame(t, multicastMAC(group), peer, group, vip6, 255)
	f.Add(ns)
	f.Add(nsFrame(t, ourMAC, peer, vip6, vip6, 255))
	f.Add(nsFrame(t, multicastMAC(group), netip.IPv6Unspecified(), group, vip6, 255))
	f.Add(nsFrameOptions(t, multicastMAC(group), netip.IPv6Unspecified(), group, vip6,
		[]ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: peerMAC}}))
	f.Add(nsFrame(t, multicastMAC(group), netip.MustParseAddr("ff02::1"), group, vip6, 255))
	f.Add(tagged(ns))
	f.Add(ns[:70])
	f.Add(UnsolicitedNA(peerMAC, peer, vip6))
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, why := NDPReply(frame, ourMAC, ourLL, owns(vip6))
		if why >= Drop(len(dropNames)) {
			t.Fatalf("unknown drop reason %d for % x", why, frame)
		}
		if why != Answered {
			return
		}
		ip := reply[14:]
		to := netip.AddrFrom16([16]byte(ip[24:40]))
		m, err := ndp.ParseMessage(ip[ipv6HeaderLen:])
		if err != nil || icmpv6Checksum(ourLL, to, ip[ipv6HeaderLen:]) != 0 {
			t.Fatalf("reply % x to % x: %v, or a bad checksum", reply, frame, err)
		}
		if na, ok := m.(*ndp.NeighborAdvertisement); !ok || na.TargetAddress != vip6 || to.IsMulticast() && to != allNodes {
			t.Fatalf("reply % x to % x is no advertisement of %s to the asker: %+v", reply, frame, vip6, m)
		}
	})
}
