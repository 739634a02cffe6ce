package l2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// A Checker asks for addresses on one interface the way a client does, an ARP request or
// a neighbour solicitation, and tells which hardware addresses answered: what a client on
// the segment gets, whatever the announcer's agent says of itself. Its methods are safe
// for concurrent use.
type Checker struct {
	ifi  net.Interface
	ipv6 bool
	conn *packet.Conn
	// src is the link-local address solicitations come from; invalid for IPv4.
	src netip.Addr

	turn   sync.Mutex  // held by Ask
	closed atomic.Bool // set by Close: a read that fails then is the end, not an error
	mu     sync.Mutex
	// asking holds, per address asked for, the answers so far.
	asking map[netip.Addr]*[]net.HardwareAddr
}

// ListenCheck returns a Checker for the addresses of family f on interface ifi whose
// kernel filter lets through the answers about addresses in ranges, and nothing else.
func ListenCheck(ifi *net.Interface, f iprange.Family, ranges []iprange.Range) (*Checker, error) {
	c := &Checker{ifi: *ifi, ipv6: f == iprange.IPv6, asking: map[netip.Addr]*[]net.HardwareAddr{}}
	proto := int(ethernet.EtherTypeARP)
	if c.ipv6 {
		var err error
		if c.src, err = linkLocal(ifi); err != nil {
			return nil, fmt.Errorf("check NDP on %s: %w", ifi.Name, err)
		}
		proto = int(ethernet.EtherTypeIPv6)
	}
	conn, err := packet.Listen(ifi, packet.Raw, proto, &packet.Config{Filter: filterOf(c.ipv6, ranges, false)})
	if err != nil {
		return nil, fmt.Errorf("check %s on %s: %w", f, ifi.Name, err)
	}
	c.conn = conn
	return c, nil
}

// linkLocal returns an IPv6 link-local address of ifi.
func linkLocal(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, errors.New("no IPv6 link-local address")
}

// A Question is a request for Addr: to To, as a client refreshing an entry asks the
// hardware address it holds, or to every host (broadcast, or the address's
// solicited-node group) when To is nil, as a client asks first.
type Question struct {
	Addr netip.Addr
	To   net.HardwareAddr
}

// Ask sends one request for each of qs, as a client asks, and returns the hardware
// addresses that answered each address within wait, in the order they did; an address
// nobody answered for has none. Asks of one Checker take turns.
func (c *Checker) Ask(ctx context.Context, qs []Question, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	c.turn.Lock()
	defer c.turn.Unlock()
	c.mu.Lock()
	for _, q := range qs {
		c.asking[q.Addr] = &[]net.HardwareAddr{}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		clear(c.asking)
		c.mu.Unlock()
	}()
	var errs []error
	for _, q := range qs {
		if err := c.send(q); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(qs) && len(qs) > 0 {
		return nil, errors.Join(errs...)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(wait):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[netip.Addr][]net.HardwareAddr, len(qs))
	for _, q := range qs {
		out[q.Addr] = slices.Clone(*c.asking[q.Addr])
	}
	return out, errors.Join(errs...)
}

// send sends the request of q.
func (c *Checker) send(q Question) error {
	addr := q.Addr
	if addr.Is6() != c.ipv6 || addr.Is4In6() {
		return fmt.Errorf("ask for %s on %s: not of the checker's family", addr, c.ifi.Name)
	}
	var frame []byte
	if c.ipv6 {
		frame = Solicitation(c.ifi.HardwareAddr, c.src, addr, q.To)
	} else {
		frame = ARPProbe(c.ifi.HardwareAddr, addr, q.To)
	}
	if _, err := c.conn.WriteTo(frame, &packet.Addr{HardwareAddr: frame[:6]}); err != nil {
		return fmt.Errorf("ask for %s on %s: %w", addr, c.ifi.Name, err)
	}
	return nil
}

// SetRanges makes the kernel's filter let through the answers about addresses in ranges,
// from the next frame on.
func (c *Checker) SetRanges(ranges []iprange.Range) error {
	if err := c.conn.SetBPF(filterOf(c.ipv6, ranges, false)); err != nil {
		return fmt.Errorf("filter the answers on %s: %w", c.ifi.Name, err)
	}
	return nil
}

// Serve reads the answers until Close, and then returns nil.
func (c *Checker) Serve() error {
	buf := make([]byte, c.ifi.MTU+64)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) || c.closed.Load() {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read on %s: %w", c.ifi.Name, err)
		}
		c.take(buf[:n])
	}
}

// take records frame as an answer, when it answers a question being asked: a reply to
// this interface's hardware address.
func (c *Checker) take(frame []byte) {
	var cl Claim
	if c.ipv6 {
		cl = NDPClaim(frame)
	} else {
		cl = ARPClaim(frame)
	}
	if cl.Kind != ClaimReply || !bytes.Equal(frame[:6], c.ifi.HardwareAddr) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if answers := c.asking[cl.Addr]; answers != nil && !slices.ContainsFunc(*answers, func(m net.HardwareAddr) bool { return bytes.Equal(m, cl.MAC) }) {
		*answers = append(*answers, slices.Clone(cl.MAC))
	}
}

// Close stops reading; Serve then returns nil.
func (c *Checker) Close() error {
	c.closed.Store(true)
	return c.conn.Close()
}

// ARPProbe returns an ARP request for addr from the hardware address mac, with sender
// address 0.0.0.0 (RFC 5227): it asks without telling anyone of an address of the asker,
// so no host enters one in its cache, and the asker needs no IPv4 address on the link.
// It goes to to, or to broadcast when to is nil.
func ARPProbe(mac net.HardwareAddr, addr netip.Addr, to net.HardwareAddr) []byte {
	p, err := arp.NewPacket(arp.OperationRequest, mac, netip.IPv4Unspecified(), zeroMAC, addr)
	if err != nil {
		panic("l2: ARP probe for " + addr.String() + ": " + err.Error())
	}
	if to == nil {
		to = ethernet.Broadcast
	}
	return arpFrame(to, mac, p)
}

// Solicitation returns a neighbour solicitation for addr from src at mac, as a client's
// kernel sends it: to addr's solicited-node group, or, when to is not nil, to addr at to,
// as a client checks an entry it holds.
func Solicitation(mac net.HardwareAddr, src, addr netip.Addr, to net.HardwareAddr) []byte {
	dst, dstMAC := solicitedNode(addr), to
	if to == nil {
		dstMAC = multicastMAC(dst)
	} else {
		dst = addr
	}
	ns := &ndp.NeighborSolicitation{
		TargetAddress: addr,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}},
	}
	return ndpFrame(dstMAC, mac, src, dst, ns)
}
