package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"time"
)

const (
	// ChallengeEvery is how often a responder changes the challenge its replies carry. A
	// ccm's request echoes the challenge of the last reply it had, a probe interval or two
	// before; the responder takes the last two challenges, and none older than twice this
	// or twice the gap between the ccm's requests, whichever is longer, so a request
	// recorded earlier is no sign of a ccm's life.
	ChallengeEvery = 500 * time.Millisecond
	// CCMForgetAfter is how long the ccm instance an agent follows may be silent before the
	// agent follows another, or SilentAfter the gap its last request promised if longer:
	// a new leader is heard within this bound after the old one falls silent, whatever
	// either says on the wire.
	CCMForgetAfter = time.Second
)

// challenges are a responder's current challenge and the one before it.
type challenges struct {
	cur, prev uint64
	since     time.Time
}

// current returns the challenge to send at now, changing it every ChallengeEvery. gap is
// how long the ccm followed may take to send its next request: a challenge lives for
// twice that at least, or a ccm probing every second would never echo a live one.
func (c *challenges) current(now time.Time, gap time.Duration) uint64 {
	switch age := now.Sub(c.since); {
	case c.cur == 0 || age >= 2*max(ChallengeEvery, gap):
		// Both are too old to be echoed by a ccm that is heard.
		c.prev, c.cur, c.since = probe.NewInstance(), probe.NewInstance(), now
	case age >= ChallengeEvery:
		c.prev, c.cur, c.since = c.cur, probe.NewInstance(), now
	}
	return c.cur
}

// echoed reports whether e is one of the last two challenges sent, and not too old for a
// ccm whose requests come gap apart.
func (c *challenges) echoed(e uint64, now time.Time, gap time.Duration) bool {
	c.current(now, gap)
	return e != 0 && (e == c.cur || e == c.prev)
}

// follow is the ccm instance an agent follows: the one whose requests count as signs of
// a ccm's life, and whose verdicts and duties it takes.
type follow struct {
	instance uint64
	// counter is the highest counter of the instance's requests taken, heard when.
	counter uint64
	heard   time.Time
}

// take reports whether a fresh request of a ccm, echoing a recent challenge, is of the
// instance followed, switching to it first when the one followed has been silent for
// CCMForgetAfter, or SilentAfter the gap it promised; and whether it is the newest of that
// instance, whose duty digest and verdict sequence hold.
func (f *follow) take(instance, counter uint64, now time.Time, gap time.Duration) (followed, newest bool) {
	if instance != f.instance {
		if f.instance != 0 && now.Sub(f.heard) < max(CCMForgetAfter, probe.SilentAfter(gap)) {
			return false, false
		}
		*f = follow{instance: instance}
	}
	f.heard = now
	if counter <= f.counter {
		return true, false
	}
	f.counter = counter
	return true, true
}
