package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"net"
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// What tells a busy agent from a dead node, and a dead agent from a busy one, besides
// the answers to probes: signs of life that come while a probe is out (its node's
// kernel answers the echo that goes with it, or the agent answers an earlier probe,
// late) make its miss a busy one; an ICMP port unreachable for it makes it refused.

// lateRing is how many missed probes of an agent a late answer may still be matched
// to: at the busy cadence, one interval apart, the last few hundred milliseconds.
const lateRing = 4

// signs is the scheduler's part of an agentProbe for the signs of life, guarded by the
// scheduler's mu.
type signs struct {
	// aliveSign says a sign of life came while the probe out was.
	aliveSign bool
	// late are the nonces of the agent's last missed probes, next the place of the next
	// one.
	late [lateRing]uint64
	next int
	// busySince is when the agent's busy episode began.
	busySince time.Time
}

// busyEpisode reports whether the agent is taken for busy now: it misses its probes
// while showing signs of life, and is not down.
func (a *agentProbe) busyEpisode() bool { return a.health.Busy && a.health.State != liveness.Down }

// busyChangedLocked logs and counts the start and end of a's busy episodes, wasBusy
// saying whether one was under way before a's last outcome.
func (s *sched) busyChangedLocked(a *agentProbe, wasBusy bool, now time.Time) {
	switch busy := a.busyEpisode() && !a.removed; {
	case busy && !wasBusy:
		a.busySince = now
		busyAgents.Inc()
		klog.InfoS("Agent misses its probes but shows signs of life; taking it for busy, not down", "node", a.node, "within", s.live.BusyTimeout)
	case !busy && wasBusy:
		busyAgents.Dec()
		switch {
		case a.removed:
		case a.health.State == liveness.Down:
			klog.InfoS("Busy agent did not answer within failover.busyTimeout", "node", a.node, "busyFor", now.Sub(a.busySince))
		default:
			klog.V(2).InfoS("Busy agent answers again", "node", a.node, "busyFor", now.Sub(a.busySince))
		}
	}
}

// lateLocked remembers the probe out of a, which just missed, for a late answer.
func (s *sched) lateLocked(a *agentProbe) {
	if old := a.late[a.next]; old != 0 {
		delete(s.late, old)
	}
	a.late[a.next] = a.nonce
	a.next = (a.next + 1) % lateRing
	s.late[a.nonce] = a
}

// forgetLateLocked forgets the missed probes of a, which is probed no more.
func (s *sched) forgetLateLocked(a *agentProbe) {
	for i, nonce := range a.late {
		if s.late[nonce] == a {
			delete(s.late, nonce)
		}
		a.late[i] = 0
	}
}

// echoed takes an echo reply from addr carrying nonce: the node of the probe with that
// nonce, if it is out and was sent to addr, lives.
func (s *sched) echoed(from netip.Addr, nonce uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.pending[nonce]
	if a == nil || a.addr.Addr().Unmap() != from {
		return
	}
	a.aliveSign = true
	echoReplies.Inc()
}

// drain takes the ICMP errors queued on conn.
func (s *sched) drain(conn *net.UDPConn) {
	// Only a probe request is of use, and a longer datagram is no request.
	liveness.DrainErrors(conn, probe.RequestLen+1, s.unreachable)
}

// unreachable takes the datagram a port unreachable answered: if it is a request of this
// prober's for a probe out, that probe ends refused, since no agent listens at the node's
// address. Anything else is a forgery, or a probe ended already, and is no use: the
// request is authenticated, its nonce random and used once.
func (s *sched) unreachable(b []byte) {
	r, err := s.p.key.ParseRequest(b)
	if err != nil {
		return
	}
	s.endOut(r.Nonce, func(a *agentProbe, now time.Time) {
		unreachables.Inc()
		s.lateLocked(a)
		s.unscheduleLocked(a)
		s.endLocked(a, liveness.Refused, now, 0, false)
	})
}
