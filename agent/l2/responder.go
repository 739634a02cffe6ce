// Package l2 makes a node answer address resolution for addresses it owns without putting
// them on an interface: ARP for IPv4, NDP for IPv6, from user space, one Responder per
// interface and family.
//
// Requests are read from a packet socket and answered there; ownership changes take
// effect for the next frame read. The same socket reads the frames in which another host
// claims an address the Responder owns (Claim), so that a conflict is noticed. Gaining an address is announced (gratuitous ARP,
// unsolicited neighbour advertisement) with Announce, which the caller repeats: without an
// announcement, a client keeps sending to the old owner until its neighbour entry times
// out, tens of seconds. Reannounce sends the same later on, to keep the network told.
package l2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Stats counts what a Responder has done.
type Stats struct {
	// Read is the number of frames read from the socket: those the kernel's filter let
	// through (ARP requests other than announcements, neighbour solicitations).
	Read uint64
	// Requests is the number of requests (ARP who-has, neighbour solicitations) read for an
	// address the Responder owned at the time.
	Requests uint64
	// Answered is the number of replies sent.
	Answered uint64
	// Gratuitous is the number of announcements sent with Announce.
	Gratuitous uint64
	// Refreshes is the number of announcements sent with Reannounce.
	Refreshes uint64
	// Claims is the number of frames read in which another hardware address claims an
	// owned address: each was passed to Config.Claims.
	Claims uint64
}

// Config configures a Responder.
type Config struct {
	// Ranges are the ranges of the pools: the kernel's filter lets through the frames
	// that claim an address inside them, and keeps others' claims in the kernel.
	Ranges []iprange.Range
	// Claims, if set, is called from Serve with every claim of an owned address for
	// another hardware address than the interface's. It must not block.
	Claims func(Claim)
}

// A Responder answers ARP or NDP on one interface for the addresses set with Set. Its
// methods are safe for concurrent use.
type Responder struct {
	ifi  net.Interface
	ipv6 bool
	conn *packet.Conn
	// groups joins the solicited-node multicast groups of owned IPv6 addresses; src is its
	// link-local address, the source of advertisements. Nil for IPv4.
	groups *ndp.Conn
	src    netip.Addr
	claims func(Claim)

	owned atomic.Pointer[map[netip.Addr]struct{}]
	mu    sync.Mutex // serialises Set

	read, requests, answered, gratuitous, refreshes, claimed atomic.Uint64
	// closed is set by Close: a read that fails then is the end, not an error.
	closed atomic.Bool
}

// ListenARP returns a Responder for the IPv4 addresses of interface ifi, owning none.
func ListenARP(ifi *net.Interface, cfg Config) (*Responder, error) {
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), &packet.Config{Filter: arpFilter(cfg.Ranges, true)})
	if err != nil {
		return nil, fmt.Errorf("listen for ARP on %s: %w", ifi.Name, err)
	}
	return newResponder(ifi, conn, nil, netip.Addr{}, cfg), nil
}

// ListenNDP returns a Responder for the IPv6 addresses of interface ifi, owning none.
// It needs the interface's link-local address, and retries until ctx ends while that
// address is still tentative (duplicate address detection runs for about a second after
// an interface comes up).
func ListenNDP(ctx context.Context, ifi *net.Interface, cfg Config) (*Responder, error) {
	var groups *ndp.Conn
	var src netip.Addr
	for {
		var err error
		groups, src, err = ndp.Listen(ifi, ndp.LinkLocal)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("listen for NDP on %s: %w", ifi.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listen for NDP on %s: link-local address still tentative: %w", ifi.Name, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The ICMPv6 socket is there to join groups; nothing is read from it, so let the
	// kernel keep everything out of its buffer.
	var none ipv6.ICMPFilter
	none.SetAll(true)
	if err := groups.SetICMPFilter(&none); err != nil {
		groups.Close()
		return nil, fmt.Errorf("listen for NDP on %s: filter ICMPv6: %w", ifi.Name, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeIPv6), &packet.Config{Filter: ndpFilter(cfg.Ranges, true)})
	if err != nil {
		groups.Close()
		return nil, fmt.Errorf("listen for NDP on %s: %w", ifi.Name, err)
	}
	return newResponder(ifi, conn, groups, src, cfg), nil
}

func newResponder(ifi *net.Interface, conn *packet.Conn, groups *ndp.Conn, src netip.Addr, cfg Config) *Responder {
	r := &Responder{ifi: *ifi, ipv6: groups != nil, conn: conn, groups: groups, src: src, claims: cfg.Claims}
	r.owned.Store(&map[netip.Addr]struct{}{})
	return r
}

// SetRanges makes the kernel's filter let through the claims of addresses in ranges,
// as Config.Ranges, from the next frame on: the pools changed.
func (r *Responder) SetRanges(ranges []iprange.Range) error {
	if err := r.conn.SetBPF(filterOf(r.ipv6, ranges, true)); err != nil {
		return fmt.Errorf("filter the pools' claims on %s: %w", r.ifi.Name, err)
	}
	return nil
}

// Interface returns the interface the Responder answers on.
func (r *Responder) Interface() net.Interface { return r.ifi }

// Set makes addrs the addresses the Responder answers for, and returns those it did not
// answer for before, which the caller should announce. Addresses of the other family are
// ignored. Lost addresses are no longer answered from the next frame read on.
func (r *Responder) Set(addrs []netip.Addr) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.owned.Load()
	now := make(map[netip.Addr]struct{}, len(addrs))
	var gained []netip.Addr
	var errs []error
	for _, a := range addrs {
		if a.Is6() != r.ipv6 {
			continue
		}
		now[a] = struct{}{}
		if _, ok := old[a]; ok {
			continue
		}
		if r.ipv6 {
			// Without the group, multicast solicitations for a never reach the interface.
			if err := r.groups.JoinGroup(solicitedNode(a)); err != nil && !errors.Is(err, syscall.EADDRINUSE) {
				errs = append(errs, fmt.Errorf("join %s for %s on %s: %w", solicitedNode(a), a, r.ifi.Name, err))
			}
		}
		gained = append(gained, a)
	}
	r.owned.Store(&now)
	if r.ipv6 {
		for a := range old {
			if _, ok := now[a]; !ok && !sharesGroup(a, now) {
				if err := r.groups.LeaveGroup(solicitedNode(a)); err != nil {
					errs = append(errs, fmt.Errorf("leave %s for %s on %s: %w", solicitedNode(a), a, r.ifi.Name, err))
				}
			}
		}
	}
	return gained, errors.Join(errs...)
}

// sharesGroup reports whether an address of owned has the solicited-node group of a.
func sharesGroup(a netip.Addr, owned map[netip.Addr]struct{}) bool {
	g := solicitedNode(a)
	for b := range owned {
		if solicitedNode(b) == g {
			return true
		}
	}
	return false
}

// Owns reports whether the Responder answers for addr.
func (r *Responder) Owns(addr netip.Addr) bool {
	_, ok := (*r.owned.Load())[addr]
	return ok
}

// Announce sends one announcement of addr: a gratuitous ARP request, or an unsolicited
// neighbour advertisement to all nodes.
func (r *Responder) Announce(addr netip.Addr) error {
	return r.announce(addr, &r.gratuitous)
}

// Reannounce sends the announcement Announce sends, of an address owned for a while
// already, and counts it apart: in Stats.Refreshes.
func (r *Responder) Reannounce(addr netip.Addr) error {
	return r.announce(addr, &r.refreshes)
}

func (r *Responder) announce(addr netip.Addr, sent *atomic.Uint64) error {
	var frame []byte
	var to net.HardwareAddr
	if r.ipv6 {
		frame, to = UnsolicitedNA(r.ifi.HardwareAddr, r.src, addr), multicastMAC(allNodes)
	} else {
		frame, to = GratuitousARP(r.ifi.HardwareAddr, addr), ethernet.Broadcast
	}
	if _, err := r.conn.WriteTo(frame, &packet.Addr{HardwareAddr: to}); err != nil {
		return fmt.Errorf("announce %s on %s: %w", addr, r.ifi.Name, err)
	}
	sent.Add(1)
	return nil
}

// Serve answers requests until Close, and then returns nil.
func (r *Responder) Serve() error {
	buf := make([]byte, r.ifi.MTU+64)
	// Counted here, once a request has passed every other check: one for an owned address.
	owns := func(a netip.Addr) bool {
		if r.Owns(a) {
			r.requests.Add(1)
			return true
		}
		return false
	}
	for {
		n, _, err := r.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) || r.closed.Load() {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read on %s: %w", r.ifi.Name, err)
		}
		r.read.Add(1)
		r.checkClaim(buf[:n])
		var reply []byte
		var why Drop
		if r.ipv6 {
			reply, why = NDPReply(buf[:n], r.ifi.HardwareAddr, r.src, owns)
		} else {
			reply, why = ARPReply(buf[:n], r.ifi.HardwareAddr, owns)
		}
		if why != Answered {
			// Every frame on a busy segment can get here: only at a high verbosity.
			klog.V(5).InfoS("Dropped a frame", "interface", r.ifi.Name, "reason", why)
			continue
		}
		if _, err := r.conn.WriteTo(reply, &packet.Addr{HardwareAddr: reply[:6]}); err == nil {
			r.answered.Add(1)
		}
	}
}

// checkClaim passes on what frame claims, when it claims an owned address for another
// hardware address than the interface's: the frames the Responder sends itself come
// back on its socket too.
func (r *Responder) checkClaim(frame []byte) {
	if r.claims == nil {
		return
	}
	var c Claim
	if r.ipv6 {
		c = NDPClaim(frame)
	} else {
		c = ARPClaim(frame)
	}
	if c.Kind == NoClaim || bytes.Equal(c.MAC, r.ifi.HardwareAddr) || !r.Owns(c.Addr) {
		return
	}
	r.claimed.Add(1)
	r.claims(c)
}

// Stats returns what the Responder has done so far.
func (r *Responder) Stats() Stats {
	return Stats{Read: r.read.Load(), Requests: r.requests.Load(), Answered: r.answered.Load(), Gratuitous: r.gratuitous.Load(), Refreshes: r.refreshes.Load(), Claims: r.claimed.Load()}
}

// Close stops answering and releases the sockets; Serve then returns, and Owns reports
// false for every address.
func (r *Responder) Close() error {
	r.mu.Lock()
	r.owned.Store(&map[netip.Addr]struct{}{})
	r.mu.Unlock()
	r.closed.Store(true)
	err := r.conn.Close()
	if r.groups != nil {
		err = errors.Join(err, r.groups.Close())
	}
	return err
}
