package contest

import (
	"testing"
	"time"
)

// TestContests walks one contest: a rewrite at once, then waits that double up to the
// cap, a give-up with one warning after MaxRewrites, and a fresh start with a new version,
// or once settled.
func TestContests(t *testing.T) {
	var cs Contests
	t0 := time.Unix(1000, 0)
	now := t0
	rewrite := func(what string) {
		t.Helper()
		if wait, giveUp, warn := cs.Next("ns/web", 1, now); wait != 0 || giveUp || warn {
			t.Fatalf("%s: Next = %v, %v, %v; want a rewrite now", what, wait, giveUp, warn)
		}
	}
	rewrite("first")
	for i, delay := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		if wait, giveUp, _ := cs.Next("ns/web", 1, now); wait != delay || giveUp {
			t.Fatalf("rewrite %d: Next = %v, %v; want a wait of %v", i+2, wait, giveUp, delay)
		}
		now = now.Add(delay)
		rewrite("after the wait")
	}
	wait, giveUp, warn := cs.Next("ns/web", 1, now)
	if !giveUp || !warn || wait != t0.Add(Window).Sub(now) {
		t.Fatalf("after %d rewrites: Next = %v, %v, %v; want to give up with a warning until the window ends", MaxRewrites, wait, giveUp, warn)
	}
	if _, giveUp, warn := cs.Next("ns/web", 1, now); !giveUp || warn {
		t.Errorf("given up again: giveUp %v, warn %v; want given up without a second warning", giveUp, warn)
	}
	if wait, giveUp, _ := cs.Next("ns/web", 2, now); wait != 0 || giveUp {
		t.Errorf("a new version: Next = %v, %v; want a rewrite now", wait, giveUp)
	}
	cs.Settled("ns/web")
	rewrite("settled")
}
