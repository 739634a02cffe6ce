package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"time"

	"k8s.io/component-base/metrics"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// The ccm probes at the full rate only the agents whose death moves an address: those a
// plan names, as announcer or standby. The others, idle, it probes probe.IdleFactor
// intervals apart, each request saying so, so that the agent expects the next one that
// much later. At 5,000 nodes of which a fifth are in a plan, that is 14,000 probes a
// second instead of 50,000, and the kernel's cost per datagram is what the prober's CPU
// is made of.
//
// An idle agent that dies is found IdleFactor intervals later at worst: nothing it
// announced moves, and the announcer takes none but Up agents, so one picked dead soon
// after is found once the plan naming it is published (its probes are then brought
// forward) and the address moves on, as from any announcer that dies.

var idleAgents = metrics.NewGauge(&metrics.GaugeOpts{
	Subsystem:      subsystem,
	Name:           "idle_agents",
	Help:           "Node agents probed at the idle rate, ten probe intervals apart: up, named in no Service's plan, and of a release that takes idle requests.",
	StabilityLevel: metrics.ALPHA,
})

// Plans is what the scheduler needs of the duty tracker: the nodes a plan names.
type Plans interface {
	// Planned returns the nodes some plan names now; nil while not known.
	Planned() *Planned
}

// Planned is the set of nodes some published plan names, as announcer or standby: the
// nodes whose death moves an address, which the ccm probes at the full rate.
type Planned struct {
	// Nodes are the nodes named; nil while not known, when every node counts as named.
	Nodes map[string]bool
	// Version increases with every change of Nodes, from 1 once known.
	Version uint64
}

// Named reports whether a plan names node, or the plans are not known yet.
func (p *Planned) Named(node string) bool { return p == nil || p.Nodes == nil || p.Nodes[node] }

// idleLocked reports whether a's next probe goes at the idle rate: it answers as up, no
// plan names it, its replies say it takes idle requests, and nothing is in doubt.
func (s *sched) idleLocked(a *agentProbe) bool {
	return s.plans != nil && !s.planned.Named(a.node) && a.takesIdle.Load() &&
		a.published == liveness.Up && a.health.State == liveness.Up && a.health.Misses == 0 && !s.iso.isolated
}

// setIdleLocked records whether the probe about to go to a says the agent is idle: the
// gap to its next probe follows what the probe said.
func (s *sched) setIdleLocked(a *agentProbe, idle bool) {
	if a.idle == idle {
		return
	}
	a.idle = idle
	if idle {
		idleAgents.Inc()
	} else {
		idleAgents.Dec()
	}
}

// replanLocked takes the plans anew when they changed: an idle agent a plan names now is
// probed at its place in the full-rate cycle, within an interval, and at that rate after.
func (s *sched) replanLocked(now time.Time) {
	if s.plans == nil {
		return
	}
	p := s.plans.Planned()
	if p == s.planned {
		return
	}
	s.planned = p
	for a := range s.agents {
		if a.idle && p.Named(a.node) {
			s.bringForwardLocked(a, now, cycle.Next(s.epoch, now, a.phase, s.cfg.ProbeInterval))
		}
	}
}

// cadence returns the interval and phase of a's probes: the idle ones if the last probe
// said it is idle.
func (s *sched) cadence(a *agentProbe) (interval, phase time.Duration) {
	if a.idle {
		return probe.Gap(s.cfg.ProbeInterval, true), a.idlePhase
	}
	return s.cfg.ProbeInterval, a.phase
}
