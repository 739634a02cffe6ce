package responder

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// heldConn is a responder's socket in a process that does not run: ReadFrom waits until
// release is closed.
type heldConn struct {
	net.PacketConn
	release chan struct{}
}

func (c *heldConn) SyscallConn() (syscall.RawConn, error) {
	return c.PacketConn.(syscall.Conn).SyscallConn()
}

func (c *heldConn) ReadFrom(b []byte) (int, net.Addr, error) {
	<-c.release
	return c.PacketConn.ReadFrom(b)
}

// TestUnread checks that a responder that has not read what came says so: an agent short
// of CPU must not take the ccm for silent while its requests wait in the socket.
func TestUnread(t *testing.T) {
	r, err := New("node-a", testKey, testVerifier, testInterval, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unread() {
		t.Fatal("Unread before Serve, want false")
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	conn := &heldConn{PacketConn: pc, release: make(chan struct{})}
	go func() { _ = r.Serve(conn) }() // nil once conn is closed; an error shows as requests unanswered
	sender, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	if _, err := sender.Write([]byte("a datagram")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.Unread() }, "Unread with a datagram in the socket")
	close(conn.release)
	waitFor(t, func() bool { return !r.Unread() }, "not Unread once the datagram is read")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 2 s: %s", what)
		}
	}
}
