package servicewatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestWatchHealth(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &watchHealth{now: func() time.Time { return now }}
	ctx := context.Background()
	check := func(wantBroken bool, wantSince time.Time) {
		t.Helper()
		since, broken := h.broken()
		if broken != wantBroken || !since.Equal(wantSince) {
			t.Fatalf("broken() = %s, %v; want %s, %v", since, broken, wantSince, wantBroken)
		}
	}
	check(false, time.Time{})
	h.observe(ctx, nil)
	check(false, time.Time{})
	broke := now
	h.observe(ctx, errors.New("connection refused"))
	check(true, broke)
	now = now.Add(5 * time.Second)
	h.observe(ctx, errors.New("connection refused")) // still broken since the first failure
	check(true, broke)
	h.observe(ctx, nil)
	check(false, time.Time{})

	// A request that ends because the informer stops says nothing of the API server.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.observe(cancelled, context.Canceled)
	check(false, time.Time{})
}

// TestWatchBrokenFollowsTheInformer runs the Service informer against an API server that
// fails every request, then answers again: no event arrives, and yet the watch is seen
// broken, then working.
func TestWatchBrokenFollowsTheInformer(t *testing.T) {
	client := fake.NewClientset()
	var failing atomic.Bool
	failing.Store(true)
	fail := func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "services", fail)
	client.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		handled, _, err := fail(a)
		return handled, nil, err
	})
	h := &watchHealth{now: time.Now}
	informer := h.newInformer(client, 0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go informer.RunWithContext(ctx)

	waitUntil(t, 5*time.Second, "the watch is seen broken", func() bool { _, broken := h.broken(); return broken })
	failing.Store(false)
	// The reflector retries after a backoff of about a second.
	waitUntil(t, 10*time.Second, "the watch is seen working again", func() bool { _, broken := h.broken(); return !broken })
	waitUntil(t, 2*time.Second, "the informer synced", informer.HasSynced)
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchEndBreaks: a watch stream that ends breaks the watch until a new one is
// accepted, though no request fails: behind a proxy whose API server is gone, the
// request for the next watch hangs, retried, for seconds.
func TestWatchEndBreaks(t *testing.T) {
	client := fake.NewClientset()
	first := watch.NewFake()
	release := make(chan struct{})
	var watches atomic.Int32
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, first, nil
		}
		<-release
		return true, watch.NewFake(), nil
	})
	h := &watchHealth{now: time.Now}
	informer := h.newInformer(client, 0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go informer.RunWithContext(ctx)
	waitUntil(t, 5*time.Second, "the informer synced", informer.HasSynced)
	waitUntil(t, 5*time.Second, "the watch works once its stream runs", func() bool { _, broken := h.broken(); return !broken })
	first.Stop() // the API server is gone
	waitUntil(t, 2*time.Second, "the watch is seen broken after its stream ended", func() bool { _, broken := h.broken(); return broken })
	close(release)
	waitUntil(t, 5*time.Second, "the watch is seen working again once a new one is accepted", func() bool { _, broken := h.broken(); return !broken })

}
