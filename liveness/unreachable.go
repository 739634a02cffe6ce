package liveness

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// A node whose kernel lives but whose agent is gone (crashed, killed, not started yet)
// answers a probe with ICMP port unreachable. The prober's sockets are unconnected, and
// such a socket hears of ICMP errors only with IP_RECVERR: each one then waits in the
// socket's error queue with the probe it answers, which names the agent. Without it,
// an agent that died on a live node would look like a busy one (its node answers
// echoes) and be taken for down only after failover.busyTimeout.
//
// With IP_RECVERR, the kernel also fails the socket's next send or receive with the
// error (once): the writer sends such a datagram again, and the reader drains the queue.

// RecvErrors asks conn's kernel to queue the ICMP errors its datagrams draw.
func RecvErrors(conn *net.UDPConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		// The socket is dual-stack: IPv4 destinations are IPv4-mapped, and their
		// errors come through IP_RECVERR.
		serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_RECVERR, 1),
			unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_RECVERR, 1))
	})
	return errors.Join(err, serr)
}

// AsyncError reports whether err may be an ICMP error the kernel reports on a later send
// or receive of the socket (IP_RECVERR), rather than one of the call itself.
func AsyncError(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.EPROTO, unix.EMSGSIZE, unix.ENOPROTOOPT, unix.EACCES:
		return true
	}
	return false
}

// DrainErrors takes every ICMP error queued on conn, and gives took the payload of each
// datagram a port unreachable answered, up to size bytes of it: a probe request, which
// names the agent probed.
func DrainErrors(conn *net.UDPConn, size int, took func(request []byte)) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	drainErrors(raw, make([]byte, size), took)
}

// drainErrors takes every ICMP error queued on raw's socket, and gives took the payload
// of each probe a port unreachable answered. buf holds one datagram.
func drainErrors(raw syscall.RawConn, buf []byte, took func(probe []byte)) {
	var oob [128]byte
	for {
		var n, oobn int
		var err error
		if cerr := raw.Control(func(fd uintptr) {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		}); cerr != nil || err != nil {
			return // empty (EAGAIN), or closed
		}
		if portUnreachable(oob[:oobn]) {
			took(buf[:n])
		}
	}
}

// portUnreachable reports whether the control messages of an error queue entry say ICMP
// or ICMPv6 port unreachable.
func portUnreachable(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		// struct sock_extended_err: ee_errno (4 bytes), then ee_origin, ee_type and
		// ee_code.
		if len(m.Data) < 7 {
			continue
		}
		origin, typ, code := m.Data[4], m.Data[5], m.Data[6]
		switch {
		case m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR,
			m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR:
		default:
			continue
		}
		switch {
		case origin == unix.SO_EE_ORIGIN_ICMP && typ == 3 && code == 3: // port unreachable
			return true
		case origin == unix.SO_EE_ORIGIN_ICMP6 && typ == 1 && code == 4: // port unreachable
			return true
		}
	}
	return false
}

// Unread returns the bytes of the first datagram waiting in c's socket, or 0: a prober
// that finds its answers waiting unread is behind in reading (short of CPU), and takes no
// miss from that.
func Unread(c syscall.Conn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n
}
