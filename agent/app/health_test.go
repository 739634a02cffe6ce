package app

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type fakeWatch struct {
	since  time.Time
	broken bool
}

func (f *fakeWatch) WatchBroken() (time.Time, bool) { return f.since, f.broken }

func TestHealth(t *testing.T) {
	now := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	w := &fakeWatch{}
	h := &health{watch: w}
	if got := h.healthy(now); got != "" {
		t.Fatalf("healthy agent: %q", got)
	}

	w.since, w.broken = now.Add(-watchGrace), true
	if got := h.healthy(now); got != "" {
		t.Errorf("watch broken for just the grace period: %q, want healthy", got)
	}
	w.since = now.Add(-time.Minute)
	got := h.healthy(now)
	if !strings.Contains(got, "Service watch broken since 2026-12-02T06:59:00Z (1m0s ago)") {
		t.Errorf("watch broken for a minute: %q", got)
	}
	if got := h.live(now); got != "" {
		t.Errorf("live with a broken watch: %q, want live: a restart would not mend it", got)
	}

	h.probeStopped(now.Add(-3*time.Second), errors.New("use of closed network connection"))
	got = h.healthy(now)
	for _, want := range []string{"probe responder stopped since 2026-12-02T06:59:57Z (3s ago): use of closed network connection", "Service watch broken"} {
		if !strings.Contains(got, want) {
			t.Errorf("healthy() = %q, want it to contain %q", got, want)
		}
	}
	if got := h.live(now); !strings.Contains(got, "probe responder stopped") {
		t.Errorf("live() = %q, want the probe responder named", got)
	}
}
