package prober

import (
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// answered reports whether the agent answered.
func (o outcome) answered() bool {
	return o == answeredReady || o == answeredDraining || o == answeredStarting
}

// outcome is the result of one probe.
type outcome int

const (
	answeredReady outcome = iota
	answeredDraining
	answeredStarting // the agent runs but cannot announce yet
	missed           // no answer in time
	refused          // ICMP port unreachable: the node is there, its agent is not
	// busy: no answer in time, but a sign of life came while the probe was out: the
	// node's kernel answered an echo, or the agent answered an earlier probe, late.
	busy
)

// recoveryThreshold is how many answers in a row bring a down agent back up, so that a
// flapping node does not pull addresses back and forth.
const recoveryThreshold = 3

// rapidInterval is the time between probes of an agent that missed one, until it answers
// or is taken for dead: detection is most of a failover, so suspicion is settled fast.
const rapidInterval = 15 * time.Millisecond

// liveness is the rule agentHealth judges by: the misses in a row that make an agent
// down, and how long an agent that misses its probes while showing signs of life (busy
// outcomes) is still taken for alive.
type liveness struct {
	threshold   int
	busyTimeout time.Duration
}

// livenessOf returns the rule of cfg.
func livenessOf(cfg config.Failover) liveness {
	return liveness{threshold: cfg.FailureThreshold, busyTimeout: cfg.BusyTimeout}
}

// agentHealth follows one agent through its probes' outcomes. It is the pure part of the
// prober.
type agentHealth struct {
	state            State
	misses, answered int // in a row
	// silent counts the misses in a row without a sign of life: a busy agent's node
	// that dies, or one whose echo reply came late once, is judged by them, as any other.
	silent int
	// busy says the last miss was a busy one; lastAlive is when the agent last answered,
	// in time or late: a busy agent is down busyTimeout after it.
	busy      bool
	lastAlive time.Time
}

// observe records an outcome at now and reports whether the state changed.
func (h *agentHealth) observe(o outcome, now time.Time, l liveness) bool {
	old := h.state
	if o == busy && l.busyTimeout == 0 {
		o = missed // no time given to busy agents
	}
	if o.answered() {
		h.busy, h.lastAlive, h.silent = false, now, 0
	}
	switch o {
	case answeredReady:
		h.misses = 0
		h.answered++
		// An agent that said what it is needs no run of answers: only a silent one might
		// be flapping.
		if h.state == Unknown || h.state == Draining || h.state == Starting || h.answered >= recoveryThreshold {
			h.state = Up
		}
	case answeredDraining:
		h.misses, h.answered = 0, 0
		h.state = Draining
	case answeredStarting:
		h.misses, h.answered = 0, 0
		h.state = Starting
	case busy:
		h.answered = 0
		h.misses++
		h.busy = true
		// An agent never heard from has no life to vouch for; one heard from is given
		// busyTimeout from its last answer, however its node answers meanwhile.
		if h.lastAlive.IsZero() {
			h.silent++
		} else {
			h.silent = 0
		}
		if h.misses >= l.threshold && (h.lastAlive.IsZero() || now.Sub(h.lastAlive) >= l.busyTimeout) {
			h.state = Down
		}
	case missed, refused:
		h.answered = 0
		h.misses++
		h.silent++
		h.busy = false
		if h.silent >= l.threshold {
			h.state = Down
		}
	}
	return h.state != old
}

// alive records an answer of the agent that came too late to count for its probe: it
// lives, and is busy.
func (h *agentHealth) alive(now time.Time) { h.lastAlive = now }

// suspect reports whether the agent has missed probes but is not yet taken for dead, nor
// for busy: rapid probes settle a suspicion, and would only add to a busy agent's load.
func (h *agentHealth) suspect() bool { return h.misses > 0 && h.state != Down && !h.busy }

// String names an outcome for logs.
func (o outcome) String() string {
	return [...]string{"answered", "draining", "starting", "missed", "refused", "busy"}[o]
}
