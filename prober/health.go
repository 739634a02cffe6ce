package prober

import "time"

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
)

// recoveryThreshold is how many answers in a row bring a down agent back up, so that a
// flapping node does not pull addresses back and forth.
const recoveryThreshold = 3

// rapidInterval is the time between probes of an agent that missed one, until it answers
// or is taken for dead: detection is most of a failover, so suspicion is settled fast.
const rapidInterval = 15 * time.Millisecond

// agentHealth follows one agent through its probes' outcomes. It is the pure part of the
// prober.
type agentHealth struct {
	state            State
	misses, answered int // in a row
}

// observe records an outcome and reports whether the state changed.
func (h *agentHealth) observe(o outcome, failureThreshold int) bool {
	old := h.state
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
	case missed, refused:
		h.answered = 0
		h.misses++
		if h.misses >= failureThreshold {
			h.state = Down
		}
	}
	return h.state != old
}

// suspect reports whether the agent has missed probes but is not yet taken for dead.
func (h *agentHealth) suspect() bool { return h.misses > 0 && h.state != Down }

// String names an outcome for logs.
func (o outcome) String() string {
	return [...]string{"answered", "draining", "starting", "missed", "refused"}[o]
}
