package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchLen is how many datagrams one system call sends or receives at most. At thousands
// of agents a call per datagram costs more than the datagrams: a batch of 32 takes the
// calls of one scheduler wake-up, or a reader's backlog, down to one or two.
const batchLen = 32

// writer sends datagrams from one socket with sendmmsg(2). It is owned by one goroutine.
type writer struct {
	raw syscall.RawConn
	// asyncErr, if set, is called when a send failed with what may be an ICMP error an
	// earlier datagram drew: the socket's error queue holds it.
	asyncErr func()
	// v6 says the socket is AF_INET6 (dual-stack): IPv4 destinations are then written as
	// IPv4-mapped IPv6 addresses.
	v6    bool
	n     int
	hdrs  [batchLen]unix.Mmsghdr
	iovs  [batchLen]unix.Iovec
	names [batchLen]unix.RawSockaddrInet6
	bufs  [batchLen][]byte
}

func newWriter(conn *net.UDPConn) (*writer, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	local, _ := conn.LocalAddr().(*net.UDPAddr)
	return &writer{raw: raw, v6: local != nil && local.IP.To4() == nil}, nil
}

// fits reports whether a datagram to to can be batched: the socket's family can carry it
// and it names no zone. Send others with the socket itself, which says why it cannot.
func (w *writer) fits(to netip.AddrPort) bool {
	return to.Addr().Zone() == "" && (w.v6 || to.Addr().Is4())
}

// buf returns the buffer of the next datagram, empty, or nil when the batch is full.
func (w *writer) buf() []byte {
	if w.n == batchLen {
		return nil
	}
	return w.bufs[w.n][:0]
}

// add queues b, which buf returned and may have grown, to be sent to to, which fits.
func (w *writer) add(b []byte, to netip.AddrPort) {
	i := w.n
	w.bufs[i] = b
	h := &w.hdrs[i]
	w.iovs[i].Base = unsafe.SliceData(b)
	w.iovs[i].SetLen(len(b))
	h.Hdr.Iov = &w.iovs[i]
	h.Hdr.SetIovlen(1)
	h.Hdr.Name = (*byte)(unsafe.Pointer(&w.names[i]))
	if w.v6 {
		sa := &w.names[i]
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: to.Addr().As16()}
		putPort(&sa.Port, to.Port())
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
	} else {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&w.names[i]))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: to.Addr().As4()}
		putPort(&sa.Port, to.Port())
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
	}
	w.n++
}

// putPort stores port in network byte order in a sockaddr's port field.
func putPort(field *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(field))
	b[0], b[1] = byte(port>>8), byte(port)
}

// flush sends the queued datagrams, and calls failed with the index, in the order of
// add, of each one the kernel refused. The batch is empty afterwards.
func (w *writer) flush(failed func(i int, err error)) {
	retried := -1
	for done := 0; done < w.n; {
		sent, err := w.send(done)
		done += sent
		if err == nil {
			continue
		}
		if liveness.AsyncError(err) && retried != done {
			// Likely the ICMP error an earlier datagram drew (IP_RECVERR), reported on
			// this call: send it again, once.
			retried = done
			if w.asyncErr != nil {
				w.asyncErr()
			}
			continue
		}
		// sendmmsg reports the error of a datagram only when it is the first of the
		// call: the datagram at done failed; go on after it.
		failed(done, err)
		done++
	}
	w.n = 0
}

// send sends the queued datagrams from the one at from on, and returns how many it sent
// and, when that is none, why.
func (w *writer) send(from int) (int, error) {
	var sent int
	var errno syscall.Errno
	err := w.raw.Write(func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[from])), uintptr(w.n-from), 0, 0, 0)
		if e == unix.EAGAIN {
			return false // the send buffer is full: wait until it is not
		}
		sent, errno = int(r), e
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case sent == 0:
		return 0, errors.New("sendmmsg sent nothing")
	}
	return sent, nil
}

// reader receives datagrams on one socket with recvmmsg(2). It is owned by one goroutine.
type reader struct {
	raw  syscall.RawConn
	hdrs [batchLen]unix.Mmsghdr
	iovs [batchLen]unix.Iovec
	bufs [batchLen][]byte
	// emptied is when a read last began that left the socket empty: every datagram that
	// arrived before it has been returned.
	emptied time.Time
}

// newReader returns the reader of conn. Its buffers take the largest datagram each, so
// that none is cut short; pages the kernel never writes to stay unallocated.
func newReader(conn *net.UDPConn, size int) (*reader, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &reader{raw: raw}
	mem := make([]byte, batchLen*size)
	for i := range batchLen {
		r.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(size)
		r.hdrs[i].Hdr.Iov = &r.iovs[i]
		r.hdrs[i].Hdr.SetIovlen(1)
	}
	return r, nil
}

// read waits for datagrams and returns how many it received; datagram returns them.
// It fails with net.ErrClosed once the socket is closed.
func (r *reader) read() (int, error) {
	var n int
	var errno syscall.Errno
	err := r.raw.Read(func(fd uintptr) bool {
		at := time.Now()
		got, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), batchLen, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			r.emptied = at
			return false
		}
		if e == 0 && got < batchLen {
			r.emptied = at
		}
		n, errno = int(got), e
		return true
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// datagram returns the i-th datagram of the last read.
func (r *reader) datagram(i int) []byte {
	return r.bufs[i][:r.hdrs[i].Len]
}
