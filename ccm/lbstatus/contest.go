package lbstatus

import (
	"sync"
	"time"
)

// ReasonStatusContested is the reason of the Warning event on a Service whose status
// another writer keeps changing back: the controller stops rewriting it for a while.
const ReasonStatusContested = "StatusContested"

// Two writers that each put back their own status would otherwise write forever, each
// write an event and an API request: the controller backs off, then leaves it to a human.
const (
	contestFirstDelay  = 2 * time.Second
	contestMaxDelay    = 16 * time.Second
	contestWindow      = 10 * time.Minute
	contestMaxRewrites = 5
)

// contest is one Service's status being changed back after the controller wrote it.
type contest struct {
	since      time.Time // the first rewrite of the window
	last       time.Time
	rewrites   int
	warned     bool
	generation int64 // a change of the Service's spec ends the contest
}

// contests holds every Service's contest, by key.
type contests struct {
	mu sync.Mutex
	m  map[string]*contest
}

// next says what to do about a status that differs from what the Service holds: write
// now (wait 0, giveUp false), wait, or give up until the window ends (wait is then
// what is left of it). warn is true once a contest, when it gives up for the first time.
func (cs *contests) next(key string, generation int64, now time.Time) (wait time.Duration, giveUp, warn bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = make(map[string]*contest)
	}
	st := cs.m[key]
	switch {
	case st == nil || st.generation != generation:
		st = &contest{since: now, generation: generation}
		cs.m[key] = st
	case now.Sub(st.since) >= contestWindow:
		// Retry once the window is over: the other writer may be gone. The warning stays
		// given.
		st.since, st.rewrites = now, 0
	}
	if st.rewrites >= contestMaxRewrites {
		warn, st.warned = !st.warned, true
		return st.since.Add(contestWindow).Sub(now), true, warn
	}
	if st.rewrites > 0 {
		delay := min(contestFirstDelay<<(st.rewrites-1), contestMaxDelay)
		if d := st.last.Add(delay).Sub(now); d > 0 {
			return d, false, false
		}
	}
	st.rewrites++
	st.last = now
	return 0, false, false
}

// settled forgets key's contest: its status is what it holds, whoever wrote it.
func (cs *contests) settled(key string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.m, key)
}
