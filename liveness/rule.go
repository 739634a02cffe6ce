package liveness

import (
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Outcome is the result of one probe.
type Outcome int

// The outcomes of a probe.
const (
	// AnsweredReady: the agent answered, ready.
	AnsweredReady Outcome = iota
	// AnsweredDraining: the agent answered, shutting down.
	AnsweredDraining
	// AnsweredStarting: the agent answered, but cannot announce yet.
	AnsweredStarting
	// Missed: no answer in time.
	Missed
	// Refused: ICMP port unreachable; the node is there, its agent is not.
	Refused
	// Busy: no answer in time, but a sign of life came while the probe was out: the
	// node's kernel answered an echo, or the agent answered an earlier probe, late.
	Busy
)

// Answered reports whether the agent answered.
func (o Outcome) Answered() bool {
	return o == AnsweredReady || o == AnsweredDraining || o == AnsweredStarting
}

// String names an outcome for logs.
func (o Outcome) String() string {
	return [...]string{"answered", "draining", "starting", "missed", "refused", "busy"}[o]
}

// RecoveryThreshold is how many answers in a row bring a down agent back up, so that a
// flapping node does not pull addresses back and forth.
const RecoveryThreshold = 3

// RapidInterval is the time between probes of an agent that missed one, until it answers
// or is taken for dead: detection is most of a failover, so suspicion is settled fast.
const RapidInterval = 15 * time.Millisecond

// Rule is what Health judges by: the misses in a row that make an agent down, and how
// long an agent that misses its probes while showing signs of life (Busy outcomes) is
// still taken for alive.
type Rule struct {
	// Threshold is failover.failureThreshold.
	Threshold int
	// BusyTimeout is failover.busyTimeout; 0 gives busy agents no time.
	BusyTimeout time.Duration
}

// RuleOf returns the rule of cfg.
func RuleOf(cfg config.Failover) Rule {
	return Rule{Threshold: cfg.FailureThreshold, BusyTimeout: cfg.BusyTimeout}
}

// Health follows one agent through its probes' outcomes: the pure part of a prober. The
// zero value is an agent not judged yet (Unknown); Health{State: s} one taken for s
// whose run of outcomes begins now.
type Health struct {
	// State is the agent's state as its outcomes make it.
	State State
	// Misses counts the misses in a row, busy or not.
	Misses   int
	answered int // in a row
	// silent counts the misses in a row without a sign of life: a busy agent's node
	// that dies, or one whose echo reply came late once, is judged by them, as any other.
	silent int
	// Busy says the last miss was a busy one; lastAlive is when the agent last answered,
	// in time or late: a busy agent is down BusyTimeout after it.
	Busy      bool
	lastAlive time.Time
}

// Observe records an outcome at now and reports whether the state changed.
func (h *Health) Observe(o Outcome, now time.Time, l Rule) bool {
	old := h.State
	if o == Busy && l.BusyTimeout == 0 {
		o = Missed // no time given to busy agents
	}
	if o.Answered() {
		h.Busy, h.lastAlive, h.silent = false, now, 0
	}
	switch o {
	case AnsweredReady:
		h.Misses = 0
		h.answered++
		// An agent that said what it is needs no run of answers: only a silent one might
		// be flapping.
		if h.State == Unknown || h.State == Draining || h.State == Starting || h.answered >= RecoveryThreshold {
			h.State = Up
		}
	case AnsweredDraining:
		h.Misses, h.answered = 0, 0
		h.State = Draining
	case AnsweredStarting:
		h.Misses, h.answered = 0, 0
		h.State = Starting
	case Busy:
		h.answered = 0
		h.Misses++
		h.Busy = true
		// An agent never heard from has no life to vouch for; one heard from is given
		// BusyTimeout from its last answer, however its node answers meanwhile.
		if h.lastAlive.IsZero() {
			h.silent++
		} else {
			h.silent = 0
		}
		if h.Misses >= l.Threshold && (h.lastAlive.IsZero() || now.Sub(h.lastAlive) >= l.BusyTimeout) {
			h.State = Down
		}
	case Missed, Refused:
		h.answered = 0
		h.Misses++
		h.silent++
		h.Busy = false
		if h.silent >= l.Threshold {
			h.State = Down
		}
	}
	return h.State != old
}

// Alive records an answer of the agent that came too late to count for its probe: it
// lives, and is busy.
func (h *Health) Alive(now time.Time) { h.lastAlive = now }

// Suspect reports whether the agent has missed probes but is not yet taken for dead, nor
// for busy: rapid probes settle a suspicion, and would only add to a busy agent's load.
func (h *Health) Suspect() bool { return h.Misses > 0 && h.State != Down && !h.Busy }

// BusyEpisode reports whether the agent is taken for busy now: it misses its probes
// while showing signs of life, and is not down.
func (h *Health) BusyEpisode() bool { return h.Busy && h.State != Down }
