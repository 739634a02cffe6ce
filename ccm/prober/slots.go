package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"container/heap"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
)

// slot is the scheduler's part of an agentProbe, guarded by the scheduler's mu.
type slot struct {
	// idx is the agent's place in the scheduler's heap, -1 when not in it.
	idx int
	// due is the agent's next event: the next send, or the deadline of the probe out.
	due time.Time
	// phase is the agent's offset in the probe interval, so that agents are probed spread
	// over the interval instead of all at once.
	phase time.Duration
	// out says a probe is out, waiting for its answer until due; claimed that its answer
	// is being taken by a reader, outside the scheduler's lock.
	out, claimed bool
	nonce        uint64
	// sent is when the probe out, or the last one, was sent; endedSent when the last probe
	// that ended was sent; censusRef when the second-to-last miss before the threshold
	// was (the last for a threshold of 1): the others must have been probed since.
	sent, endedSent, censusRef time.Time
	// deadline is when the probe out is a miss, unless its answer waits in a socket;
	// extended says it was put back once, this prober having stalled while it was out.
	deadline time.Time
	extended bool
	health   liveness.Health
	// published is the state the scheduler last gave the prober (transition); seq counts
	// those, so that the prober takes them in order.
	published liveness.State
	seq       uint64
	// sendErrs counts the attempts in a row whose probe could not be sent.
	sendErrs int
	// census asks for the next probe at once, when the probe out ends.
	census bool
	// removed says the agent is probed no more.
	removed bool
	// idle says the last probe sent told the agent it is probed at the idle rate, and
	// idlePhase is its offset in that cycle.
	idle      bool
	idlePhase time.Duration
	signs
}

// dueHeap orders agents by their next event.
type dueHeap []*agentProbe

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *dueHeap) Push(x any) {
	a := x.(*agentProbe)
	a.idx = len(*h)
	*h = append(*h, a)
}

func (h *dueHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.idx = -1
	return a
}

// setDueLocked schedules a's next event at t, and wakes the scheduler when it comes first.
func (s *sched) setDueLocked(a *agentProbe, t time.Time) {
	a.due = t
	if a.idx < 0 {
		heap.Push(&s.heap, a)
	} else {
		heap.Fix(&s.heap, a.idx)
	}
	if a.idx == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// unscheduleLocked takes a out of the heap.
func (s *sched) unscheduleLocked(a *agentProbe) {
	if a.idx >= 0 {
		heap.Remove(&s.heap, a.idx)
	}
}

// nextProbeLocked schedules a's next probe after its last one ended at now, with sendErr
// when it could not be sent.
func (s *sched) nextProbeLocked(a *agentProbe, now time.Time, sendErr bool) {
	var next time.Time
	switch {
	case a.census:
		a.census = false
		next = now
	case sendErr && a.health.State == liveness.Down:
		next = now.Add(liveness.Backoff(a.sendErrs, s.cfg.FailureThreshold, s.cfg.ProbeInterval))
	case a.health.Suspect() && !s.iso.isolated:
		// Suspicion is settled at once; while this ccm is isolated, every agent is suspect
		// and rapid probes of thousands would only fill its own queues.
		next = a.sent.Add(s.rapid)
	default:
		// Back to the agent's place in the cycle, at least half an interval on, so that a
		// probe answered after rapid ones is not followed by another at once. An idle
		// agent's cycle is IdleFactor intervals long: its next probe comes within that and
		// half an interval, far from the 1.5 cycles after which the agent takes the ccm for
		// silent.
		interval, phase := s.cadence(a)
		next = cycle.Next(s.epoch, a.sent.Add(s.cfg.ProbeInterval/2), phase, interval)
	}
	s.setDueLocked(a, later(next, now))
}

// bringForwardLocked has a probe sent to a by at, or as soon as the probe out ends if
// that one was sent before ref.
func (s *sched) bringForwardLocked(a *agentProbe, ref, at time.Time) {
	switch {
	case a.claimed || a.out:
		if a.sent.Before(ref) {
			a.census = true
		}
	case a.due.After(at):
		s.setDueLocked(a, at)
	}
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
