// Package contest bounds how hard a controller of the ccm fights another writer over a
// field of a Service's status: two writers that each put back their own value would
// otherwise write forever, each write an API request and often an event. The controller
// backs off, then leaves the field to a human.
package contest

import (
	"sync"
	"time"
)

// ReasonStatusContested is the reason of the Warning event on a Service whose status
// another writer keeps changing back: the controller stops rewriting it for a while.
const ReasonStatusContested = "StatusContested"

// The rewrites a contest allows: 2 s, 4 s, 8 s and 16 s apart, at most MaxRewrites in
// Window, then none until the Window ends or the Service's spec changes.
const (
	firstDelay = 2 * time.Second
	maxDelay   = 16 * time.Second
	// Window is how long a contest that was given up stays given up.
	Window = 10 * time.Minute
	// MaxRewrites is how many rewrites a contest allows in a Window.
	MaxRewrites = 5
)

// contest is one Service's status being changed back after the controller wrote it.
type contest struct {
	since    time.Time // the first rewrite of the window
	last     time.Time
	rewrites int
	warned   bool
	version  int64 // a new version ends the contest
}

// Contests holds every Service's contest, by key. The zero value is ready to use.
type Contests struct {
	mu sync.Mutex
	m  map[string]*contest
}

// Next says what to do about a status that differs from what the controller wants: write
// now (wait 0, giveUp false), wait, or give up until the window ends (wait is then
// what is left of it). warn is true once a contest, when it gives up for the first time.
// version is what the contest is about, such as the Service's generation: a new version
// starts a new contest at once.
func (cs *Contests) Next(key string, version int64, now time.Time) (wait time.Duration, giveUp, warn bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = make(map[string]*contest)
	}
	st := cs.m[key]
	switch {
	case st == nil || st.version != version:
		st = &contest{since: now, version: version}
		cs.m[key] = st
	case now.Sub(st.since) >= Window:
		// Retry once the window is over: the other writer may be gone. The warning stays
		// given.
		st.since, st.rewrites = now, 0
	}
	if st.rewrites >= MaxRewrites {
		warn, st.warned = !st.warned, true
		return st.since.Add(Window).Sub(now), true, warn
	}
	if st.rewrites > 0 {
		delay := min(firstDelay<<(st.rewrites-1), maxDelay)
		if d := st.last.Add(delay).Sub(now); d > 0 {
			return d, false, false
		}
	}
	st.rewrites++
	st.last = now
	return 0, false, false
}

// Settled forgets key's contest: its status is what the controller wants, whoever wrote
// it.
func (cs *Contests) Settled(key string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.m, key)
}
