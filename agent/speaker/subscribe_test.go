package speaker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// fakeNetlink stands in for the kernel: the test closes its channels as netlink does
// when a subscription fails.
type fakeNetlink struct {
	mu       sync.Mutex
	links    []chan netlink.LinkUpdate
	addrs    []chan netlink.AddrUpdate
	failNext int // subscriptions to refuse before the next succeeds
	attempts atomic.Int64
	reads    atomic.Int64
}

func (f *fakeNetlink) subscribe(<-chan struct{}, func(error)) (<-chan netlink.LinkUpdate, <-chan netlink.AddrUpdate, error) {
	f.attempts.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return nil, nil, errors.New("no buffer space available")
	}
	l, a := make(chan netlink.LinkUpdate, 64), make(chan netlink.AddrUpdate, 64)
	f.links, f.addrs = append(f.links, l), append(f.addrs, a)
	return l, a, nil
}

func (f *fakeNetlink) readLinks() ([]Link, error) {
	f.reads.Add(1)
	return nil, nil
}

// subscription returns the channels of the i-th successful subscription.
func (f *fakeNetlink) subscription(i int) (chan netlink.LinkUpdate, chan netlink.AddrUpdate, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.links) {
		return nil, nil, false
	}
	return f.links[i], f.addrs[i], true
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunRenewsClosedSubscription closes the link subscription as netlink does on
// ENOBUFS: Run must neither spin on the closed channel nor stop following the links.
func TestRunRenewsClosedSubscription(t *testing.T) {
	f := &fakeNetlink{}
	s := New(Options{})
	s.subscribe, s.readLinks, s.resync = f.subscribe, f.readLinks, time.Hour
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { done <- s.Run(ctx) }()
	waitFor(t, 2*time.Second, "first read of the links", func() bool { return f.reads.Load() == 1 })

	links, _, _ := f.subscription(0)
	f.mu.Lock()
	f.failNext = 1 // the first attempt to renew fails too
	f.mu.Unlock()
	close(links)
	// Before the first renewal (100 ms later): one read for the updates the failure lost.
	time.Sleep(50 * time.Millisecond)
	if n := f.reads.Load(); n > 2 {
		t.Fatalf("%d reads of the links 50 ms after the subscription closed: the loop spins on the closed channel", n)
	}
	// 100 ms, a failed attempt, 200 ms more, the renewal.
	waitFor(t, 2*time.Second, "a renewed subscription", func() bool { _, _, ok := f.subscription(1); return ok })
	waitFor(t, time.Second, "a read of the links after renewing", func() bool { return f.reads.Load() == 3 })
	if n := f.attempts.Load(); n != 3 {
		t.Errorf("%d subscription attempts, want 3 (the first, a failed one, the renewal)", n)
	}
	if n := s.Stats().Resubscriptions; n != 1 {
		t.Errorf("Stats().Resubscriptions = %d, want 1", n)
	}

	// The new subscription is followed.
	_, addrs, _ := f.subscription(1)
	addrs <- netlink.AddrUpdate{}
	waitFor(t, time.Second, "a read of the links for an update of the renewed subscription", func() bool { return f.reads.Load() == 4 })
	time.Sleep(50 * time.Millisecond)
	if n := f.reads.Load(); n != 4 {
		t.Errorf("%d reads of the links after one update, want 4", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second, healthy: time.Minute}
	var got []time.Duration
	for range 6 {
		got = append(got, b.failed(0))
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	if w := b.failed(time.Second); w != time.Second {
		t.Errorf("after a short-lived subscription: %s, want the maximum", w)
	}
	if w := b.failed(time.Minute); w != 100*time.Millisecond {
		t.Errorf("after a healthy subscription: %s, want the minimum again", w)
	}
}

// TestRunReadsLinksWhileUnsubscribed keeps every renewal failing: the links are read
// every resync meanwhile, and the loop waits rather than spins.
func TestRunReadsLinksWhileUnsubscribed(t *testing.T) {
	f := &fakeNetlink{}
	s := New(Options{})
	s.subscribe, s.readLinks, s.resync = f.subscribe, f.readLinks, 20*time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, 2*time.Second, "first read of the links", func() bool { return f.reads.Load() == 1 })
	f.mu.Lock()
	f.failNext = 1 << 30
	f.mu.Unlock()
	links, addrs, _ := f.subscription(0)
	close(links)
	close(addrs)

	before, start := cpuTime(t), time.Now()
	time.Sleep(400 * time.Millisecond)
	used, elapsed := cpuTime(t)-before, time.Since(start)
	if used > elapsed/2 {
		t.Errorf("the process used %s of CPU in %s without a subscription: the loop spins", used, elapsed)
	}
	if n := f.reads.Load(); n < 5 {
		t.Errorf("%d reads of the links in %s with a resync of 20 ms, want one per resync", n, elapsed)
	}
	// 100, 200 ms: a third attempt at 300 ms, the fourth not before 700 ms.
	if n := f.attempts.Load(); n < 3 || n > 4 {
		t.Errorf("%d subscription attempts in %s, want 3 or 4 with a backoff from 100 ms", n, elapsed)
	}
}

// cpuTime returns the CPU time the test process has used so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
