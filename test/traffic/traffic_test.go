package traffic

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestOutage(t *testing.T) {
	t0 := time.Now()
	var reqs []Request
	at := func(ms int, ok bool) {
		reqs = append(reqs, Request{Start: t0.Add(time.Duration(ms) * time.Millisecond), OK: ok})
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
	if !reqs[0].OK || reqs[0].Node != "node-x" {
		t.Errorf("first request %+v, want answered by node-x", reqs[0])
	}
	if last := reqs[len(reqs)-1]; last.OK {
		t.Errorf("last request %+v succeeded after the server closed", last)
	}
	if _, err := Reach(context.Background(), d.DialContext, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addr.Port())); err == nil {
		t.Error("Reach succeeded with the server closed")
	}
}
