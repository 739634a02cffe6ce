package l2

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// listen runs open on an OS thread inside h's namespace, on h's segment interface.
func listen[T any](t *testing.T, h *netns.Host, open func(*net.Interface) (T, error)) T {
	t.Helper()
	var v T
	if err := h.Do(func() error {
		ifi, err := net.InterfaceByName(h.Interface)
		if err != nil {
			return err
		}
		v, err = open(ifi)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// onTheWire starts an ARP Responder configured with cfg on node1 of a new network, and
// opens a packet socket for ARP on node2, its peer.
func onTheWire(t *testing.T, cfg Config) (r *Responder, owner, peer *netns.Host, conn *packet.Conn) {
	t.Helper()
	n := netns.ForTest(t, 2)
	owner, peer = n.Nodes[0], n.Nodes[1]
	r = listen(t, owner, func(ifi *net.Interface) (*Responder, error) { return ListenARP(ifi, cfg) })
	served := make(chan error, 1)
	go func() { served <- r.Serve() }()
	t.Cleanup(func() {
		r.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve after Close: %v, want nil", err)
		}
	})
	conn = listen(t, peer, func(ifi *net.Interface) (*packet.Conn, error) {
		return packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	})
	t.Cleanup(func() { conn.Close() })
	return r, owner, peer, conn
}

// own makes r own vip and n more addresses, 198.18.2.0 on, and returns them, vip first.
func own(t *testing.T, r *Responder, vip netip.Addr, n int) []netip.Addr {
	t.Helper()
	owned := []netip.Addr{vip}
	for i := range n {
		owned = append(owned, netip.AddrFrom4([4]byte{198, 18, 2, byte(i)}))
	}
	if _, err := r.Set(owned); err != nil {
		t.Fatal(err)
	}
	return owned
}

// TestARPOnTheWire has a Responder on a real interface answer a request sent among a
// failover's worth of other nodes' announcements and replies, while it announces
// addresses of its own, and sees that only the request reached user space.
func TestARPOnTheWire(t *testing.T) {
	const noise = 200
	r, owner, peer, conn := onTheWire(t, Config{})
	vip := netip.MustParseAddr("198.18.0.210")
	owned := own(t, r, vip, noise)
	// The owner's own announcements go out too, as in a takeover.
	for _, a := range owned[1:] {
		if err := r.Announce(a); err != nil {
			t.Fatal(err)
		}
	}
	// Other nodes' announcements and replies, as a failover elsewhere on the segment sends.
	bcast := &packet.Addr{HardwareAddr: ethernet.Broadcast}
	for i := range noise {
		a := netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})
		if _, err := conn.WriteTo(GratuitousARP(peer.MAC, a), bcast); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteTo(arpFrame(owner.MAC, peer.MAC, arpPacket(t, arp.OperationReply, peer.MAC, a, owner.MAC, owner.IPv4)), bcast); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.WriteTo(arpFrame(ethernet.Broadcast, peer.MAC, arpPacket(t, arp.OperationRequest, peer.MAC, peer.IPv4, ethernet.Broadcast, vip)), bcast); err != nil {
		t.Fatal(err)
	}

	if err := awaitReply(conn, owner.MAC, vip); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().Answered == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := r.Stats()
	if st.Answered != 1 || st.Requests != 1 {
		t.Errorf("Stats() = %+v, want 1 request for an owned address and 1 answer", st)
	}
	if st.Read != 1 {
		t.Errorf("Stats().Read = %d, want 1: only the request should reach user space, not the %d announcements and %d replies around it", st.Read, noise, noise)
	}
	if st.Gratuitous != noise {
		t.Errorf("Stats().Gratuitous = %d, want %d", st.Gratuitous, noise)
	}
}

// TestClaimsOnTheWire has a Responder read, among a failover's worth of other nodes'
// announcements of the pool's addresses and its own announcements, a host's claim of an
// address it owns, and sees that only the claim is passed on, and that its own frames and
// claims outside the pools stay in the kernel (a packet socket bound to one protocol does
// not see the frames its host sends).
func TestClaimsOnTheWire(t *testing.T) {
	const noise = 200
	claims := make(chan Claim, 10)
	pools := []iprange.Range{iprange.FromPrefix(netip.MustParsePrefix("198.18.0.0/16"))}
	r, _, peer, conn := onTheWire(t, Config{Ranges: pools, Claims: func(c Claim) { claims <- c }})
	vip := netip.MustParseAddr("198.18.0.210")
	owned := own(t, r, vip, noise)
	for _, a := range owned {
		if err := r.Announce(a); err != nil {
			t.Fatal(err)
		}
	}
	bcast := &packet.Addr{HardwareAddr: ethernet.Broadcast}
	for i := range noise {
		// Inside the pools but not owned: read, and dropped in user space.
		if _, err := conn.WriteTo(GratuitousARP(peer.MAC, netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})), bcast); err != nil {
			t.Fatal(err)
		}
		// Outside the pools: kept in the kernel.
		if _, err := conn.WriteTo(GratuitousARP(peer.MAC, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})), bcast); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.WriteTo(GratuitousARP(peer.MAC, vip), bcast); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-claims:
		if c.Addr != vip || !bytes.Equal(c.MAC, peer.MAC) || c.Kind != ClaimAnnouncement {
			t.Errorf("claim %+v, want an announcement of %s by %s", c, vip, peer.MAC)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's announcement of an owned address was not passed on")
	}
	if st := r.Stats(); st.Claims != 1 || st.Read != noise+1 {
		t.Errorf("Stats() = %+v, want 1 claim, and %d frames read: the peer's announcements inside the pools, none of the %d outside them nor of the owner's own %d", st, noise+1, noise, len(owned))
	}
	select {
	case c := <-claims:
		t.Errorf("another claim passed on: %+v", c)
	default:
	}
}

// awaitReply reads conn until the ARP reply that says addr is at mac.
func awaitReply(conn *packet.Conn, mac net.HardwareAddr, addr netip.Addr) error {
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	buf := make([]byte, 1514)
	for {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no ARP reply for %s from %s: %w", addr, mac, err)
		}
		var f ethernet.Frame
		var p arp.Packet
		if f.UnmarshalBinary(buf[:n]) != nil || p.UnmarshalBinary(f.Payload) != nil {
			continue
		}
		if p.Operation == arp.OperationReply && p.SenderIP == addr && bytes.Equal(p.SenderHardwareAddr, mac) {
			return nil
		}
	}
}

// arpPacket is arp.NewPacket, failing the test on a bad argument.
func arpPacket(t *testing.T, op arp.Operation, srcMAC net.HardwareAddr, srcIP netip.Addr, dstMAC net.HardwareAddr, dstIP netip.Addr) *arp.Packet {
	t.Helper()
	p, err := arp.NewPacket(op, srcMAC, srcIP, dstMAC, dstIP)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
