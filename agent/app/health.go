package app

import (
	"fmt"
	"sync"
	"time"
)

// watchGrace is how long the Service watch may be broken before /healthz says so: as long
// as the speaker's resync (10 s), which covers the reflector's first retries after a
// dropped connection, so that one blip of the API server is not reported.
const watchGrace = 10 * time.Second

// health is what /healthz and /livez report on.
type health struct {
	watch interface {
		WatchBroken() (since time.Time, broken bool)
	}

	mu             sync.Mutex
	probeStoppedAt time.Time // zero while the probe responder serves
	probeErr       error
}

// probeStopped records that the probe responder's Serve returned err.
func (h *health) probeStopped(at time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probeStoppedAt, h.probeErr = at, err
}

// live returns why the agent should be restarted, "" when it should not: its probe
// responder has stopped, and the ccm takes the node for dead while it runs on.
func (h *health) live(now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return probeProblem(now, h.probeStoppedAt, h.probeErr)
}

// healthy returns what is dead and since when, "" when nothing is: the probe responder,
// or the Service watch broken for longer than watchGrace.
func (h *health) healthy(now time.Time) string {
	since, broken := h.watch.WatchBroken()
	return joinProblems(h.live(now), watchProblem(now, since, broken))
}

func probeProblem(now, stoppedAt time.Time, err error) string {
	if stoppedAt.IsZero() {
		return ""
	}
	return fmt.Sprintf("probe responder stopped since %s (%s ago): %v", stoppedAt.UTC().Format(time.RFC3339), now.Sub(stoppedAt).Round(time.Second), err)
}

func watchProblem(now, since time.Time, broken bool) string {
	if !broken || now.Sub(since) <= watchGrace {
		return ""
	}
	return fmt.Sprintf("Service watch broken since %s (%s ago); announcing what the cache last held", since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second))
}

func joinProblems(problems ...string) string {
	out := ""
	for _, p := range problems {
		if p == "" {
			continue
		}
		if out != "" {
			out += "\n"
		}
		out += p
	}
	return out
}
