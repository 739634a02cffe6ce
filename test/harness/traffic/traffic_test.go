package traffic

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestOutage(t *testing.T) {
	t0 := time.Now()
	var reqs []Request
	at := func(ms int, ok bool) {
		r := Request{Start: t0.Add(time.Duration(ms) * time.Millisecond)}
		if !ok {
			r.Err = context.DeadlineExceeded
		}
		reqs = append(reqs, r)
	}
	at(-10, true)
	for ms := 0; ms < 150; ms += 10 {
		at(ms, false)
	}
	at(150, true) // a success that does not last
	at(160, false)
	for ms := 170; ms < 170+10*RecoveryStreak; ms += 10 {
		at(ms, true)
	}
	at(500, false) // stray
	at(510, true)
	got, stray, ok := Outage(reqs, t0)
	if !ok || got != 170*time.Millisecond || stray != 1 {
		t.Errorf("Outage = %v, %d stray, recovered %v; want 170ms, 1, true", got, stray, ok)
	}
	if got, _, ok := Outage(reqs[:5], t0); ok {
		t.Errorf("an unrecovered run gave %v", got)
	}
	if got, _, ok := Outage(reqs[len(reqs)-RecoveryStreak-2:len(reqs)-2], t0.Add(170*time.Millisecond)); !ok || got != 0 {
		t.Errorf("a run without failures gave %v, recovered %v; want 0, true", got, ok)
	}
}

func TestClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(l, "node-x")
	addr := l.Addr().(*net.TCPAddr).AddrPort()
	var d net.Dialer
	c := Start(d.DialContext, addr, 10*time.Millisecond, 100*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	l.Close() // from here on, every request fails
	time.Sleep(100 * time.Millisecond)
	reqs := c.Stop()
	if len(reqs) < 20 {
		t.Fatalf("%d requests in 300 ms at one per 10 ms", len(reqs))
	}
	if !reqs[0].OK() || reqs[0].Node != "node-x" {
		t.Errorf("first request %+v, want answered by node-x", reqs[0])
	}
	if last := reqs[len(reqs)-1]; last.OK() {
		t.Errorf("last request %+v succeeded after the server closed", last)
	}
	if _, err := Reach(context.Background(), d.DialContext, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addr.Port())); err == nil {
		t.Error("Reach succeeded with the server closed")
	}
}

// listen listens on a free port of addr's loopback and stops at the end of the test,
// skipping the test if the machine lacks that family.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Skipf("no %s here: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestServePod(t *testing.T) {
	for _, tt := range []struct{ network, listen, dial, client string }{
		{"tcp", "127.0.0.1", "127.0.0.1", "127.0.0.1"},
		{"tcp", "::1", "::1", "::1"},
		// One socket for both families: an IPv4 client shows as ::ffff:127.0.0.1, which
		// the answer gives as the IPv4 address it is.
		{"tcp", "::", "127.0.0.1", "127.0.0.1"},
	} {
		t.Run(tt.listen+"<-"+tt.dial, func(t *testing.T) {
			l := listen(t, tt.listen)
			done := make(chan struct{})
			go func() { defer close(done); ServePod(l, "web-0", "node-x") }()
			port := l.Addr().(*net.TCPAddr).AddrPort().Port()
			var d net.Dialer
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			addr := netip.AddrPortFrom(netip.MustParseAddr(tt.dial), port)
			got, err := Ask(ctx, d.DialContext, addr)
			if err != nil {
				t.Fatal(err)
			}
			want := Answer{Pod: "web-0", Node: "node-x", Client: netip.MustParseAddr(tt.client)}
			if got != want {
				t.Errorf("Ask = %+v, want %+v", got, want)
			}
			// Reach, as callers of a node's server use it, names the node.
			if node, err := Reach(ctx, d.DialContext, addr); err != nil || node != "node-x" {
				t.Errorf("Reach = %q, %v; want node-x", node, err)
			}
			l.Close()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("ServePod still running 5 s after its listener was closed")
			}
		})
	}
}

func TestParseAnswer(t *testing.T) {
	for _, tt := range []struct {
		line string
		want Answer
	}{
		{"node1", Answer{Node: "node1"}},
		{"pod=web-0 node=node1 client=198.18.0.200", Answer{Pod: "web-0", Node: "node1", Client: netip.MustParseAddr("198.18.0.200")}},
		{"client=fd00:198:19:1::2 node=node2 pod=web-1", Answer{Pod: "web-1", Node: "node2", Client: netip.MustParseAddr("fd00:198:19:1::2")}},
	} {
		got, err := ParseAnswer(tt.line)
		if err != nil || got != tt.want {
			t.Errorf("ParseAnswer(%q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
	for _, line := range []string{
		"",
		"node 1",
		"pod=web-0 node=node1", // no client
		"pod=web-0 node=node1 client=198.18.0.999",  // not an address
		"pod=web-0 node=node1 client=",              // empty
		"pod=web-0 node=node1 client=1.2.3.4 x=y",   // unknown field
		"pod=web-0 pod=web-1 node=node1 client=::1", // twice
		"pod=web-0  node=node1 client=::1",          // an empty field
		"pod=a=b node=node1 client=::1",
		"=x node=node1 client=::1",
	} {
		if got, err := ParseAnswer(line); err == nil {
			t.Errorf("ParseAnswer(%q) = %+v, want an error", line, got)
		}
	}
}

// FuzzParseAnswer checks that whatever ParseAnswer accepts, it writes back as a line
// that parses to the same answer.
func FuzzParseAnswer(f *testing.F) {
	f.Add("node1")
	f.Add("pod=web-0 node=node1 client=198.18.0.200")
	f.Add("pod=web-0 node=node1 client=fd00:198:19:1::2")
	f.Fuzz(func(t *testing.T, line string) {
		a, err := ParseAnswer(line)
		if err != nil {
			return
		}
		again, err := ParseAnswer(a.String())
		if err != nil || again != a {
			t.Errorf("ParseAnswer(%q) = %+v, whose String %q parses to %+v, %v", line, a, a.String(), again, err)
		}
	})
}

// TestClientOfPod checks that a Client of a pod's server records the node, the pod and
// the client address of every request.
func TestClientOfPod(t *testing.T) {
	l := listen(t, "127.0.0.1")
	go ServePod(l, "web-0", "node-x")
	var d net.Dialer
	c := Start(d.DialContext, l.Addr().(*net.TCPAddr).AddrPort(), 5*time.Millisecond, time.Second)
	defer c.Stop()
	for deadline := time.Now().Add(10 * time.Second); len(c.Requests()) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests finished in 10 s at one per 5 ms", len(c.Requests()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, r := range c.Stop() {
		if !r.OK() || r.Node != "node-x" || r.Pod != "web-0" || r.ClientAddr != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("request %+v, want answered by web-0 on node-x, which saw 127.0.0.1", r)
		}
	}
}

// TestAskUntil: a connection that stalls, as one whose first SYN met a node without the
// Service's rules does, does not hold AskUntil: the next attempt, on a new connection, is
// answered. With no server at all it gives up when its context ends, naming the address.
func TestAskUntil(t *testing.T) {
	l := listen(t, "127.0.0.1")
	stalled := make(chan net.Conn, 1)
	go func() {
		first, err := l.Accept()
		if err != nil {
			return
		}
		stalled <- first // accepted and never answered
		ServePod(l, "web-0", "node-x")
	}()
	t.Cleanup(func() {
		select {
		case c := <-stalled:
			c.Close()
		default:
		}
	})
	var d net.Dialer
	addr := l.Addr().(*net.TCPAddr).AddrPort()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	got, err := AskUntil(ctx, d.DialContext, addr, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("AskUntil after a stalled connection: %v", err)
	}
	if got.Pod != "web-0" {
		t.Errorf("AskUntil = %+v, want the answer of web-0", got)
	}

	l.Close()
	ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := AskUntil(ctx, d.DialContext, addr, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), addr.String()) {
		t.Errorf("AskUntil with no server: %v, want an error naming %s", err, addr)
	}
}
