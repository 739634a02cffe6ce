package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"net"
	"strconv"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const interval = 100 * time.Millisecond
	for _, tc := range []struct {
		errs int
		want time.Duration
	}{
		{3, interval}, {4, 2 * interval}, {5, 4 * interval}, {6, 4 * interval}, {1000, 4 * interval},
	} {
		if got := liveness.Backoff(tc.errs, 3, interval); got != tc.want {
			t.Errorf("backoff after %d failed sends = %v, want %v", tc.errs, got, tc.want)
		}
	}
}

func TestIsolatedBy(t *testing.T) {
	for _, tc := range []struct {
		lost, probed int
		want         bool
	}{
		{1, 1, false}, // the only node of a one-node cluster fails over
		{1, 2, false}, // so does one of two
		{2, 2, true},
		{2, 3, true},
		{2, 4, false}, // half is not more than half
		{3, 4, true},
		{5, 6, true},
		{2500, 5000, false},
		{2501, 5000, true},
	} {
		if got := isolatedBy(tc.lost, tc.probed, 0.5); got != tc.want {
			t.Errorf("isolatedBy(%d lost of %d) = %v, want %v", tc.lost, tc.probed, got, tc.want)
		}
	}
}

// TestCensusDecides checks when a census may end before every agent it awaits had its
// probe: only once no outcome of theirs could make the prober isolated, so that no
// isolation is ever taken for downs.
func TestCensusDecides(t *testing.T) {
	for _, tc := range []struct {
		lost, awaiting, probed int
		want                   bool
	}{
		{1, 0, 6, true},  // all in
		{1, 5, 6, false}, // nothing in yet
		{1, 3, 6, false}, // four of six may still be lost
		{1, 2, 6, true},  // three of six at most: not more than half
		{1, 1, 2, false}, // two of two would be an isolation
		{1, 2499, 5000, true},
		{1, 2500, 5000, false},
		{2400, 100, 5000, true},
		{2400, 101, 5000, false},
	} {
		if got := censusDecides(tc.lost, tc.awaiting, tc.probed, 0.5); got != tc.want {
			t.Errorf("censusDecides(%d lost, %d awaited of %d) = %v, want %v", tc.lost, tc.awaiting, tc.probed, got, tc.want)
		}
	}
}

// TestRapidReprobes checks the rhythm of probes at an agent that never answers: rapid
// probes until it is taken for down, then one probe an interval again, at its phase.
func TestRapidReprobes(t *testing.T) {
	port := agentPort(t)
	arrivals := silentAgent(t, port)
	startProber(t, port, testNode("silent", "127.0.0.2"))
	var at []time.Time
	for len(at) < 6 {
		select {
		case a := <-arrivals:
			at = append(at, a)
		case <-time.After(2 * time.Second):
			t.Fatalf("only %d probes arrived", len(at))
		}
	}
	const interval = 50 * time.Millisecond
	// Misses 1 to 3, each followed at once by the next (the first probe's time, a quarter
	// of the interval, is up before the rapid interval); then the agent's place in the
	// cycle, at least half an interval on; then one probe an interval.
	// Arrivals are stamped by a goroutine, so a late stamp shortens the next gap as much as
	// it lengthens its own: the bounds tell a rapid probe from none (a gap of 0) and from
	// an interval's, not the timer's precision.
	want := []struct{ lo, hi time.Duration }{
		{liveness.RapidInterval / 2, liveness.RapidInterval + 15*time.Millisecond},
		{liveness.RapidInterval / 2, liveness.RapidInterval + 15*time.Millisecond},
		{interval/2 - 10*time.Millisecond, 3*interval/2 + 15*time.Millisecond},
		{interval - 20*time.Millisecond, interval + 20*time.Millisecond},
	}
	for i, w := range want {
		if gap := at[i+1].Sub(at[i]); gap < w.lo || gap > w.hi {
			t.Errorf("probe %d came %v after the one before, want %v to %v (gaps %v)", i+2, gap, w.lo, w.hi, gaps(at))
		}
	}
}

// silentAgent listens at 127.0.0.2:port until the test ends, answering nothing, and
// returns when each probe request arrives.
func silentAgent(t *testing.T, port int) <-chan time.Time {
	conn, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	arrivals := make(chan time.Time, 100)
	go func() {
		b := make([]byte, 512)
		for {
			n, _, err := conn.ReadFrom(b)
			if err != nil {
				return
			}
			if n > 3 && b[3] == 1 { // a request, not the verdict
				arrivals <- time.Now()
			}
		}
	}()
	return arrivals
}

func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return out
}
