package l2

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
)

func TestARPClaim(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	reply := arpFrame(ourMAC, peerMAC, arpPacket(t, arp.OperationReply, peerMAC, vip4, ourMAC, netip.MustParseAddr("198.18.0.1")))
	replyForm := arpFrame(bcast, peerMAC, arpPacket(t, arp.OperationReply, peerMAC, vip4, peerMAC, vip4))
	// A reply-form announcement some hosts send: target hardware address its own, target
	// address another.
	replyToSelf := arpFrame(bcast, peerMAC, arpPacket(t, arp.OperationReply, peerMAC, vip4, peerMAC, netip.MustParseAddr("198.18.0.1")))
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Claim
	}{
		{"gratuitous request", GratuitousARP(peerMAC, vip4), Claim{vip4, peerMAC, ClaimAnnouncement}},
		{"gratuitous reply", replyForm, Claim{vip4, peerMAC, ClaimAnnouncement}},
		{"reply to its own hardware address", replyToSelf, Claim{vip4, peerMAC, ClaimAnnouncement}},
		{"reply", reply, Claim{vip4, peerMAC, ClaimReply}},
		{"request from the address", arpRequest(t, bcast, peerMAC, "198.18.0.10", "198.18.0.1"), Claim{vip4, peerMAC, ClaimSource}},
		// Switches' device tracking sends these to hosts: questions, not claims.
		{"probe (RFC 5227)", arpRequest(t, bcast, peerMAC, "0.0.0.0", "198.18.0.10"), Claim{}},
		{"tagged", tagged(GratuitousARP(peerMAC, vip4)), Claim{}},
		{"truncated", GratuitousARP(peerMAC, vip4)[:30], Claim{}},
		{"not ARP", UnsolicitedNA(peerMAC, netip.MustParseAddr("fe80::c8"), vip6), Claim{}},
	} {
		got := ARPClaim(tc.frame)
		if got.Addr != tc.want.Addr || got.Kind != tc.want.Kind || !bytes.Equal(got.MAC, tc.want.MAC) {
			t.Errorf("%s: ARPClaim = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNDPClaim(t *testing.T) {
	peerLL := netip.MustParseAddr("fe80::c8")
	group := solicitedNode(vip6)
	solicited := naFrame(ourMAC, peerMAC, peerLL, ourLL, vip6, true)
	// An advertisement whose option names another hardware address than the frame's
	// source: a cache enters the option's.
	proxied := withNS(t, naFrame(ourMAC, peerMAC, peerLL, ourLL, vip6, true), func(icmp []byte) { copy(icmp[len(icmp)-6:], otherMAC) })
	badSum := UnsolicitedNA(peerMAC, peerLL, vip6)
	badSum[14+ipv6HeaderLen+2] ^= 1
	hopped := UnsolicitedNA(peerMAC, peerLL, vip6)
	hopped[14+7] = 64
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Claim
	}{
		{"unsolicited advertisement", UnsolicitedNA(peerMAC, peerLL, vip6), Claim{vip6, peerMAC, ClaimAnnouncement}},
		{"solicited advertisement", solicited, Claim{vip6, peerMAC, ClaimReply}},
		{"advertisement naming another hardware address", proxied, Claim{vip6, otherMAC, ClaimReply}},
		{"duplicate address detection", nsFrame(t, multicastMAC(group), netip.IPv6Unspecified(), group, vip6, 255), Claim{vip6, peerMAC, ClaimDAD}},
		{"solicitation from the address", nsFrame(t, multicastMAC(solicitedNode(ourLL)), vip6, solicitedNode(ourLL), ourLL, 255), Claim{vip6, peerMAC, ClaimSource}},
		{"solicitation from a link-local address", nsFrame(t, multicastMAC(group), peerLL, group, vip6, 255), Claim{}},
		// A unicast solicitation from :: checks that a host is there; it configures nothing.
		{"unicast solicitation from ::", nsFrame(t, ourMAC, netip.IPv6Unspecified(), vip6, vip6, 255), Claim{}},
		{"forwarded by a router", hopped, Claim{}},
		{"bad checksum", badSum, Claim{}},
		{"not NDP", GratuitousARP(peerMAC, vip4), Claim{}},
	} {
		got := NDPClaim(tc.frame)
		if got.Addr != tc.want.Addr || got.Kind != tc.want.Kind || !bytes.Equal(got.MAC, tc.want.MAC) {
			t.Errorf("%s: NDPClaim = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
