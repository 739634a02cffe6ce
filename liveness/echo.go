package liveness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Echoer asks the kernels of the nodes whose agents miss probes whether they live, with
// ICMP echo requests. A kernel answers an echo in its network softirq, before any
// process runs: an agent starved of CPU (a node whose cores are all busy, a CFS quota
// spent, a pause) misses its probes while its node still answers, and a dead node, or
// one cut off, answers neither. Each echo carries the nonce of the probe it goes with,
// so that a reply counts for that probe only and is no use to replay.
//
// An echo reply is not authenticated: whoever sees the request can answer it. It only
// ever delays a failover, by at most failover.busyTimeout after the agent's last
// authenticated answer (Health.Observe).
type Echoer struct {
	// conns are the sockets for IPv4 and IPv6; either may be nil, when it cannot be
	// opened.
	conns [2]*icmp.PacketConn
	// ping says a socket is an unprivileged ICMP socket (addressed by UDP address),
	// else a raw one.
	ping [2]bool
}

// OpenEchoer opens the echo sockets: unprivileged ICMP sockets where the process's group
// is in net.ipv4.ping_group_range, else raw ones, which need CAP_NET_RAW. It fails only
// when neither family can be opened; then nothing tells a busy agent from a dead node.
func OpenEchoer() (*Echoer, error) {
	e := &Echoer{}
	var errs []error
	for i, f := range []struct{ ping, raw, any string }{{"udp4", "ip4:icmp", "0.0.0.0"}, {"udp6", "ip6:ipv6-icmp", "::"}} {
		c, err := icmp.ListenPacket(f.ping, f.any)
		if err == nil {
			e.conns[i], e.ping[i] = c, true
			continue
		}
		c, rawErr := icmp.ListenPacket(f.raw, f.any)
		if rawErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w; %s: %w", f.ping, err, f.raw, rawErr))
			continue
		}
		// A raw socket sees every ICMP message the host gets: only echo replies are
		// wanted.
		if i == 0 {
			filterEchoReplies4(c)
		} else {
			var filter ipv6.ICMPFilter
			filter.SetAll(true)
			filter.Accept(ipv6.ICMPTypeEchoReply)
			_ = c.IPv6PacketConn().SetICMPFilter(&filter)
		}
		e.conns[i] = c
	}
	if e.conns[0] == nil && e.conns[1] == nil {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

// filterEchoReplies4 has a raw ICMPv4 socket drop every message but echo replies
// (ICMP_FILTER, raw(7)).
func filterEchoReplies4(c *icmp.PacketConn) {
	const icmpFilter = 1 // ICMP_FILTER: a mask of the types to drop
	sc, ok := c.IPv4PacketConn().PacketConn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_RAW, icmpFilter, ^(1 << int(ipv4.ICMPTypeEchoReply)))
	})
}

// Send sends an echo request carrying nonce to addr's kernel.
func (e *Echoer) Send(addr netip.Addr, nonce uint64) error {
	addr = addr.Unmap()
	i := 0
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if addr.Is6() {
		i, typ = 1, ipv6.ICMPTypeEchoRequest
	}
	c := e.conns[i]
	if c == nil {
		return fmt.Errorf("no ICMP socket for %s", addr)
	}
	data := binary.BigEndian.AppendUint64(nil, nonce)
	// The identifier is the socket's own on an unprivileged socket, which the kernel
	// sets; on a raw one, replies are told apart by the nonce alone.
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(nonce >> 48), Seq: int(uint16(nonce)), Data: data}}).Marshal(nil)
	if err != nil {
		return err
	}
	var to net.Addr = &net.IPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	if e.ping[i] {
		to = &net.UDPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	}
	_, err = c.WriteTo(b, to)
	return err
}

// Read takes the echo replies arriving on every socket open until Close, each read by a
// goroutine of its own, and gives took the address each came from and the nonce it
// carries.
func (e *Echoer) Read(took func(from netip.Addr, nonce uint64)) {
	for i, c := range e.conns {
		if c != nil {
			go e.read(i, took)
		}
	}
}

// read takes the echo replies arriving on the socket of family i (0 IPv4, 1 IPv6) until
// it is closed, and gives took the address each came from and the nonce it carries.
func (e *Echoer) read(i int, took func(from netip.Addr, nonce uint64)) {
	c := e.conns[i]
	proto := 1 // ICMP
	if i == 1 {
		proto = 58 // ICMPv6
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		nonce, ok := parseEchoReply(proto, buf[:n])
		if !ok {
			continue
		}
		var ip net.IP
		switch a := from.(type) {
		case *net.UDPAddr:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		took(addr.Unmap(), nonce)
	}
}

// parseEchoReply returns the nonce an echo reply of protocol proto (1 ICMP, 58 ICMPv6)
// carries, and false for anything else: another type of message, or data of another
// length than a nonce's, which no echo request of the prober's draws.
func parseEchoReply(proto int, b []byte) (nonce uint64, ok bool) {
	m, err := icmp.ParseMessage(proto, b)
	if err != nil || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
		return 0, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || len(echo.Data) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(echo.Data), true
}

// Close closes the sockets, which ends Read.
func (e *Echoer) Close() {
	for _, c := range e.conns {
		if c != nil {
			c.Close()
		}
	}
}
