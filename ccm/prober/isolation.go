package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
)

// Isolation is what the ccm's prober makes of many agents lost at once: when more than
// failover.isolationShare of the agents it probes stop answering together, it is this
// ccm that is cut off (its pod network, a NetworkPolicy, UDP filtered where it runs), not
// the agents that died. It then takes none of them for down, so that nothing is moved or
// re-hashed, until most answer again.
type Isolation struct {
	// Isolated says the prober takes itself for cut off now.
	Isolated bool
	// Lost are the nodes whose agents have not answered their last probe and whose state
	// is kept, sorted.
	Lost []string
	// Probed is how many agents are probed.
	Probed int
	// Window is the time from the first lost probe to the decision.
	Window time.Duration
	// Since is when the prober took itself for cut off; zero when it is not.
	Since time.Time
}

// isolatedBy is the rule: at least 2 agents lost (a single agent lost, the only one of a
// one-node cluster or one of two, fails over as usual), and more than share of those
// probed.
func isolatedBy(lost, probed int, share float64) bool {
	return lost >= 2 && float64(lost) > share*float64(probed)
}

// censusDecides reports whether a census has settled whether the prober is isolated, with
// lost agents lost and awaiting still to have their probe: once it could not be an
// isolation even were every agent awaited lost, the rest cannot change the judgement.
// Waiting for them would add the slowest of thousands of answers to every detection.
func censusDecides(lost, awaiting, probed int, share float64) bool {
	return awaiting == 0 || !isolatedBy(lost+awaiting, probed, share)
}

// isolation is the scheduler's part of the judgement, guarded by its mu.
type isolation struct {
	isolated bool
	// lost are the agents not down that missed their last probe; gated those of them
	// whose misses reached the threshold, held until the census says whether others
	// are lost too.
	lost, gated map[*agentProbe]bool
	// awaiting are the agents that must have had a probe sent at ref or later (a gated
	// agent's second-to-last miss) before a gated agent is judged, until enough have
	// (censusDecides): the census. lastCensus is when probes were last brought forward
	// for one: at most once per interval.
	ref, lastCensus time.Time
	awaiting        map[*agentProbe]bool
	// exitAwaiting are the agents still lost when most answered again, that must have
	// had a probe sent at exitRef or later before the prober ends the episode: else the
	// agents whose turn has not come yet would be taken for down.
	exitRef      time.Time
	exitAwaiting map[*agentProbe]bool
	since        time.Time
	window       time.Duration
}

// endLocked takes the outcome of a's probe, which ended at now, publishes a's new state
// unless it is held for the census or an isolation, and schedules its next probe.
func (s *sched) endLocked(a *agentProbe, o liveness.Outcome, now time.Time, rtt time.Duration, sendErr bool) {
	a.endedSent = a.sent
	a.lastProbe.Store(now.UnixNano())
	if !sendErr {
		a.sendErrs = 0
	}
	answered := o.Answered()
	if answered && a.health.State == liveness.Down && a.published != liveness.Down {
		// Its misses were held (a census, an isolation) and it answers again: it was
		// never down for anyone, and needs no answers in a row to come back.
		a.health = liveness.Health{State: a.published}
	}
	wasBusy := a.busyEpisode()
	a.health.Observe(o, now, s.live)
	s.busyChangedLocked(a, wasBusy, now)
	if !answered && a.health.Misses == max(s.cfg.FailureThreshold-1, 1) {
		// The others must have been probed since this miss, not only since the first:
		// an agent missing since just before this ccm was cut off would otherwise be
		// judged on answers that came before the cut.
		a.censusRef = a.sent
	}
	switch {
	case a.health.State != liveness.Down && a.health.State != a.published:
		s.publishLocked(a, a.health.State, o, rtt)
	case a.health.State == liveness.Down && a.published != liveness.Down && (s.share == 0 || a.health.Busy):
		// A busy agent's node answered this ccm, which is then not cut off: no census.
		s.publishLocked(a, liveness.Down, o, rtt)
	}
	s.classifyLocked(a)
	if s.share > 0 {
		if !a.sent.Before(s.iso.ref) {
			delete(s.iso.awaiting, a)
		}
		if answered || !a.sent.Before(s.iso.exitRef) {
			delete(s.iso.exitAwaiting, a)
		}
		// From the second-to-last miss on, the others are probed at once, so that the
		// judgement is ready when the last miss comes.
		if s.iso.lost[a] && !s.iso.isolated && a.health.Misses >= max(s.cfg.FailureThreshold-1, 1) {
			s.censusLocked(a.censusRef, now)
		}
	}
	s.nextProbeLocked(a, now, sendErr)
	s.judgeLocked(now)
}

func (s *sched) publishLocked(a *agentProbe, st liveness.State, o liveness.Outcome, rtt time.Duration) {
	a.published = st
	a.seq++
	s.effects = append(s.effects, effect{a: a, state: st, o: o, rtt: rtt, seq: a.seq})
}

// classifyLocked files a under lost and gated. A busy agent is not lost: its node
// answered this ccm, which is then not cut off from it.
func (s *sched) classifyLocked(a *agentProbe) {
	lost := !a.removed && a.published != liveness.Down && a.health.Misses > 0 && !a.health.Busy
	setIf(s.iso.lost, a, lost)
	setIf(s.iso.gated, a, lost && a.health.State == liveness.Down)
}

func setIf(m map[*agentProbe]bool, a *agentProbe, in bool) {
	if in {
		m[a] = true
	} else {
		delete(m, a)
	}
}

func (s *sched) forgetLocked(a *agentProbe) {
	delete(s.iso.lost, a)
	delete(s.iso.gated, a)
	delete(s.iso.awaiting, a)
	delete(s.iso.exitAwaiting, a)
}

// censusLocked makes sure every agent not lost nor down has had a probe sent at ref or
// later before an agent that missed a probe sent at ref is judged. The probes are brought
// forward at most once per interval; otherwise they come in their turn of the full-rate
// cycle, within an interval.
func (s *sched) censusLocked(ref, now time.Time) {
	if s.iso.awaiting != nil && !ref.After(s.iso.ref) {
		return // under way, or done, for this agent
	}
	s.iso.ref = later(s.iso.ref, ref)
	force := now.Sub(s.iso.lastCensus) >= s.cfg.ProbeInterval
	if force {
		s.iso.lastCensus = now
		censuses.Inc()
	}
	s.iso.awaiting = map[*agentProbe]bool{}
	for b := range s.agents {
		if b.published == liveness.Down || s.iso.lost[b] || !b.endedSent.Before(s.iso.ref) {
			continue
		}
		s.iso.awaiting[b] = true
	}
	if force {
		// Spread over a rapid interval, the time the missing agent's last probe takes
		// anyway: thousands of probes at once would only queue, here and at the agents.
		k, n := 0, time.Duration(len(s.iso.awaiting))
		for b := range s.iso.awaiting {
			s.bringForwardLocked(b, s.iso.ref, now.Add(time.Duration(k)*s.rapid/n))
			k++
		}
	} else {
		// An idle agent's turn may be IdleFactor intervals away: at its place in the
		// full-rate cycle instead, so that the judgement waits an interval at most.
		for b := range s.iso.awaiting {
			if b.idle {
				s.bringForwardLocked(b, s.iso.ref, cycle.Next(s.epoch, now, b.phase, s.cfg.ProbeInterval))
			}
		}
	}
	klog.V(4).InfoS("Probing every agent before judging a missing one", "awaiting", len(s.iso.awaiting), "broughtForward", force)
}

// judgeLocked takes the held agents for down, or the prober for isolated, once the census
// is complete; and ends an isolation once most agents answer again.
func (s *sched) judgeLocked(now time.Time) {
	switch {
	case s.share == 0:
		return
	case s.iso.isolated:
		s.judgeIsolatedLocked(now)
		return
	case len(s.iso.gated) == 0 || s.iso.awaiting == nil || !censusDecides(len(s.iso.lost), len(s.iso.awaiting), len(s.agents), s.share):
		return
	}
	if isolatedBy(len(s.iso.lost), len(s.agents), s.share) {
		s.iso.isolated, s.iso.since, s.iso.window = true, now, now.Sub(s.iso.ref)
		s.iso.awaiting = nil
		s.effects = append(s.effects, effect{iso: s.viewLocked()})
		return
	}
	for a := range s.iso.gated {
		s.publishLocked(a, liveness.Down, liveness.Missed, 0)
		s.classifyLocked(a)
	}
}

func (s *sched) judgeIsolatedLocked(now time.Time) {
	if isolatedBy(len(s.iso.lost), len(s.agents), s.share) {
		s.iso.exitAwaiting = nil
		return
	}
	if s.iso.exitAwaiting == nil {
		s.iso.exitRef = now
		s.iso.exitAwaiting = map[*agentProbe]bool{}
		k, n := 0, time.Duration(len(s.iso.lost))
		for a := range s.iso.lost {
			s.iso.exitAwaiting[a] = true
			s.bringForwardLocked(a, now, now.Add(time.Duration(k)*s.rapid/n))
			k++
		}
	}
	if len(s.iso.exitAwaiting) > 0 {
		return
	}
	s.iso.exitAwaiting, s.iso.isolated, s.iso.since = nil, false, time.Time{}
	s.effects = append(s.effects, effect{iso: s.viewLocked()})
	// Those still not answering, though most agents do, are suspected anew: down after
	// the thresholds, as usual.
	for a := range s.iso.lost {
		a.health = liveness.Health{State: a.published}
		a.health.Observe(liveness.Missed, now, s.live)
		a.censusRef = a.endedSent
		s.classifyLocked(a)
		if !a.out && !a.claimed {
			s.setDueLocked(a, now)
		}
		if a.health.Misses >= max(s.cfg.FailureThreshold-1, 1) {
			s.censusLocked(a.censusRef, now)
		}
	}
	s.judgeLocked(now)
}

// viewLocked returns the isolation as it is now.
func (s *sched) viewLocked() *Isolation {
	v := &Isolation{Isolated: s.iso.isolated, Probed: len(s.agents), Window: s.iso.window, Since: s.iso.since}
	for a := range s.iso.lost {
		v.Lost = append(v.Lost, a.node)
	}
	slices.Sort(v.Lost)
	return v
}

// effect is something the scheduler decided under its lock, for the prober to take
// after: an agent's new state, or an isolation that began or ended.
type effect struct {
	a     *agentProbe
	state liveness.State
	o     liveness.Outcome
	rtt   time.Duration
	seq   uint64
	iso   *Isolation
}

func (s *sched) takeEffectsLocked() []effect {
	e := s.effects
	s.effects = nil
	return e
}

// apply takes what the scheduler decided. p.mu is not held.
func (p *Prober) apply(effects []effect) {
	for _, e := range effects {
		if e.iso != nil {
			p.isolationChanged(*e.iso)
			continue
		}
		p.transition(e.a.node, e.a, e.state, e.o, e.rtt, e.seq)
	}
}

// Isolation returns whether the prober takes itself for cut off from the agents now,
// and the agents it lost.
func (p *Prober) Isolation() Isolation {
	p.mu.Lock()
	s := p.sched
	p.mu.Unlock()
	if s == nil {
		return Isolation{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.viewLocked()
}

// OnIsolation registers f to be called when the prober takes itself for cut off from the
// agents, and when it no longer does.
func (p *Prober) OnIsolation(f func(Isolation)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isoListeners = append(p.isoListeners, f)
}

func (p *Prober) isolationChanged(v Isolation) {
	if v.Isolated {
		isolated.Set(1)
		isolations.Inc()
		klog.InfoS("Most agents stopped answering at once; taking it for this ccm's own isolation and keeping every agent's state",
			"lost", len(v.Lost), "probed", v.Probed, "within", v.Window, "nodes", few(v.Lost))
	} else {
		isolated.Set(0)
		klog.InfoS("Agents answer again; deciding on probes as usual", "stillLost", len(v.Lost), "nodes", few(v.Lost))
	}
	p.mu.Lock()
	listeners := p.isoListeners
	p.mu.Unlock()
	for _, f := range listeners {
		f(v)
	}
}
