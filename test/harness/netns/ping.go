package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"
)

// pings numbers the echo requests of this process, so that each Ping, even concurrent
// ones in one namespace, recognises its own reply among all that its raw socket sees.
var pings atomic.Uint32

// ICMP and ICMPv6 message types.
const (
	icmpEchoReply     = 0
	icmpEchoRequest   = 8
	icmpv6EchoRequest = 128
	icmpv6EchoReply   = 129
)

// Ping sends one ICMP or ICMPv6 echo request from the host to dst and waits up to
// timeout for the reply, as `ping -c1 -W` does, but without needing a ping program. The
// host's kernel resolves dst as for any other traffic, through its neighbour table. dst
// must not be a link-local address.
func (h *Host) Ping(dst netip.Addr, timeout time.Duration) error {
	dst = dst.Unmap()
	network, request, reply := "ip4:icmp", byte(icmpEchoRequest), byte(icmpEchoReply)
	if dst.Is6() {
		network, request, reply = "ip6:ipv6-icmp", icmpv6EchoRequest, icmpv6EchoReply
	}
	var c net.PacketConn
	err := h.Do(func() (err error) {
		c, err = net.ListenPacket(network, "")
		return err
	})
	if err != nil {
		return fmt.Errorf("netns %s: ping %s: %w", h.Name, dst, err)
	}
	defer c.Close()

	n := pings.Add(1)
	id, seq := uint16(os.Getpid())^uint16(n>>16), uint16(n)
	msg := make([]byte, 8+8)
	msg[0] = request
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	binary.BigEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
	if dst.Is4() {
		// The kernel fills in the checksum of ICMPv6 itself, not that of ICMP.
		binary.BigEndian.PutUint16(msg[2:], checksum(msg))
	}

	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("netns %s: ping %s: %w", h.Name, dst, err)
	}
	if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("netns %s: ping %s: %w", h.Name, dst, err)
	}
	buf := make([]byte, 1500)
	for {
		// A raw socket gets every ICMP message the namespace receives: wait for ours.
		// For IPv4, Go removes the IP header.
		m, from, err := c.ReadFrom(buf)
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			return fmt.Errorf("netns %s: ping %s: no reply within %s", h.Name, dst, timeout)
		}
		if err != nil {
			return fmt.Errorf("netns %s: ping %s: %w", h.Name, dst, err)
		}
		b := buf[:m]
		src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		if len(b) >= 8 && b[0] == reply && src.Unmap() == dst &&
			binary.BigEndian.Uint16(b[4:]) == id && binary.BigEndian.Uint16(b[6:]) == seq {
			return nil
		}
	}
}

// checksum returns the Internet checksum (RFC 1071) of b.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
