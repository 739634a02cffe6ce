package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Every sender of requests has a budget of its own, so that no one sender, flooding or
// replaying, can spend what another needs. A ccm sends an agent 10 requests a second,
// about 70 while it suspects it; a peer checking it while no ccm is heard, 10.
const (
	ccmRate, ccmBurst   = 500, 100
	peerRate, peerBurst = 50, 20
	// maxCCMs bounds the ccm instances a responder remembers: a few in a cluster's
	// lifetime. The one heard longest ago is forgotten for a new one.
	maxCCMs = 64
	// maxPeers bounds the peer instances: a node backs up at most a few hundred peers,
	// and each has one instance while it checks.
	maxPeers = 4096
	// senderIdle is how long a sender may be silent before the responder may forget it.
	senderIdle = 30 * time.Second
)

// senderKey names the sender of a request: its kind and its instance.
type senderKey struct {
	from     probe.Sender
	instance uint64
}

// senderState is what a responder keeps of one sender.
type senderState struct {
	window replayWindow
	budget *rate.Limiter
	last   time.Time
}

// senders is the state of the senders heard lately, bounded by maxCCMs and maxPeers.
type senders struct {
	mu        sync.Mutex
	m         map[senderKey]*senderState
	count     [probe.FromAgent + 1]int
	nextSweep time.Time
}

// verdict is what senders decides of a request.
type verdict uint8

const (
	taken verdict = iota
	replayed
	limited
)

// admit decides whether a request of sender k with counter may be answered: one whose
// counter the sender's window has seen is a replay, and costs no budget; a fresh one
// over the sender's budget is limited.
func (s *senders) admit(k senderKey, counter uint64, now time.Time) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[k]
	if st == nil {
		if st = s.add(k, now); st == nil {
			return limited
		}
	}
	if !st.window.take(counter) {
		return replayed
	}
	st.last = now
	if !st.budget.AllowN(now, 1) {
		return limited
	}
	return taken
}

// add makes room for, and adds, the state of a new sender; nil when every peer slot is
// held by one heard within senderIdle.
func (s *senders) add(k senderKey, now time.Time) *senderState {
	if s.m == nil {
		s.m = map[senderKey]*senderState{}
	}
	limit, r, burst := maxPeers, rate.Limit(peerRate), peerBurst
	if k.from == probe.FromCCM {
		limit, r, burst = maxCCMs, ccmRate, ccmBurst
	}
	if s.count[k.from] >= limit && !now.Before(s.nextSweep) {
		s.sweep(now)
	}
	if s.count[k.from] >= limit {
		if k.from != probe.FromCCM {
			return nil
		}
		// A new ccm is always heard: the leader that is silent longest is forgotten.
		var oldest senderKey
		for o, st := range s.m {
			if o.from == probe.FromCCM && (oldest.instance == 0 || st.last.Before(s.m[oldest].last)) {
				oldest = o
			}
		}
		s.forget(oldest)
	}
	st := &senderState{budget: rate.NewLimiter(r, burst), last: now}
	s.m[k] = st
	s.count[k.from]++
	return st
}

// sweep forgets the senders silent for senderIdle, at most once a second, so that a flood
// of new senders costs no more than one pass a second over those held.
func (s *senders) sweep(now time.Time) {
	s.nextSweep = now.Add(time.Second)
	for k, st := range s.m {
		if now.Sub(st.last) > senderIdle {
			s.forget(k)
		}
	}
}

func (s *senders) forget(k senderKey) {
	if _, ok := s.m[k]; ok {
		delete(s.m, k)
		s.count[k.from]--
	}
}
