package prober

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestBatch sends a batch from a dual-stack socket to IPv4 and IPv6 loopback sockets, with
// a datagram the kernel refuses in the middle, and reads them back in batches.
func TestBatch(t *testing.T) {
	from, err := net.ListenUDP("udp", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	v4, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	v6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer v6.Close()
	to4, to6 := v4.LocalAddr().(*net.UDPAddr).AddrPort(), v6.LocalAddr().(*net.UDPAddr).AddrPort()
	// The kernel refuses a datagram to port 0.
	refused := netip.AddrPortFrom(to4.Addr(), 0)

	w, err := newWriter(from)
	if err != nil {
		t.Fatal(err)
	}
	if !w.v6 {
		t.Fatalf("a socket listening on %v is not taken for dual-stack", from.LocalAddr())
	}
	if w.fits(netip.MustParseAddrPort("[fe80::1%lo]:7474")) {
		t.Error("an address with a zone fits a batch")
	}
	var want4, want6 []string
	n := 2*batchLen + 5 // more than a batch: the caller flushes when it is full
	var failures []int
	flushed := 0
	flush := func() {
		w.flush(func(i int, err error) {
			if err != syscall.EINVAL {
				t.Errorf("datagram %d failed with %v, want EINVAL", flushed+i, err)
			}
			failures = append(failures, flushed+i)
		})
	}
	for i := range n {
		b := w.buf()
		if b == nil {
			flush()
			flushed = i
			b = w.buf()
		}
		b = fmt.Appendf(b, "datagram %d", i)
		switch {
		case i == 3:
			w.add(b, refused)
		case i%2 == 0:
			w.add(b, to4)
			want4 = append(want4, string(b))
		default:
			w.add(b, to6)
			want6 = append(want6, string(b))
		}
	}
	flush()
	if !slices.Equal(failures, []int{3}) {
		t.Errorf("failed datagrams %v, want [3]", failures)
	}
	if w.n != 0 {
		t.Errorf("%d datagrams left in the batch after a flush", w.n)
	}
	for _, c := range []struct {
		conn *net.UDPConn
		want []string
	}{{v4, want4}, {v6, want6}} {
		r, err := newReader(c.conn, 64)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		batches := 0
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for len(got) < len(c.want) {
			k, err := r.read()
			if err != nil {
				t.Fatalf("read on %v after %d datagrams: %v", c.conn.LocalAddr(), len(got), err)
			}
			batches++
			for i := range k {
				got = append(got, string(r.datagram(i)))
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v received %q, want %q", c.conn.LocalAddr(), got, c.want)
		}
		if batches >= len(c.want) {
			t.Errorf("%v read %d datagrams in %d calls: not in batches", c.conn.LocalAddr(), len(got), batches)
		}
	}
}

// TestReaderClosed sees a reader's wait end when its socket is closed.
func TestReaderClosed(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newReader(c, 64)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.read()
		done <- err
	}()
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read on a closed socket: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still waits 5s after its socket was closed")
	}
}
