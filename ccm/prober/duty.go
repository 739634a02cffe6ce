package prober

import (
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Duties is what the ccm's prober needs to know of what each agent should announce, and
// which nodes a plan names: a *duty.Tracker.
type Duties interface {
	Plans
	// Duty returns the digest of node's duty, and whether it is known.
	Duty(node string) (probe.Digest, bool)
	// List returns node's duty, its digest, and whether it is known.
	List(node string) ([]netip.Addr, probe.Digest, bool)
}

// SetDuties makes the ccm's requests carry the digest of each agent's duty, the prober
// send the list to an agent whose own view differs, and probe at the idle rate the agents
// no plan names. Call it before Run.
func (p *Prober) SetDuties(d Duties) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.duties = d
}

// dutyWire is a duty list's datagrams, signed once for as long as it stays the node's.
type dutyWire struct {
	instance uint64
	digest   probe.Digest
	parts    [][]byte
}

// dutyFor returns the datagrams of node's duty list when its agent's reply shows a view
// other than the ccm's, and nil otherwise. The agent takes the list only while its own
// view stays different, so sending it with every such reply costs nothing in steady state;
// the list is signed once, and sent again as it is while it stays the node's.
func (p *Prober) dutyFor(a *agentProbe, r probe.Reply) [][]byte {
	p.mu.Lock()
	duties, instance := p.duties, p.instance
	p.mu.Unlock()
	if duties == nil {
		return nil
	}
	addrs, digest, known := duties.List(a.node)
	if !known || r.Digest == digest {
		return nil
	}
	dutiesSent.Inc()
	if w, ok := p.dutyWire.Load(a.node); ok && w.(*dutyWire).instance == instance && w.(*dutyWire).digest == digest {
		return w.(*dutyWire).parts
	}
	d := probe.Duty{Instance: instance, Seq: p.dutySeq.Add(1), To: a.tag, Digest: digest, Addrs: addrs}
	out, err := p.key.AppendDuty(p.signer, d)
	if err != nil {
		klog.ErrorS(err, "Cannot send an agent its duty", "node", a.node, "addresses", len(addrs))
		return nil
	}
	p.dutyWire.Store(a.node, &dutyWire{instance: instance, digest: digest, parts: out})
	return out
}

// Unable returns the pools and families node's agent said, in its last reply, it cannot
// announce now; nil for an agent not probed.
func (p *Prober) Unable(node string) []probe.Unable {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.agents[node]; a != nil {
		return a.unable
	}
	return nil
}

// takeAbilityLocked records what a reply says the agent cannot announce, and whether it
// announces only what the ccm confirms, and reports whether the former changed: the
// announcer must then decide the agent's groups again.
func (p *Prober) takeAbilityLocked(node string, a *agentProbe, r probe.Reply) bool {
	if r.ConfirmedOnly != a.confirmedOnly {
		klog.InfoS("Agent announces only what the ccm confirms", "node", node, "confirmedOnly", r.ConfirmedOnly)
		a.confirmedOnly = r.ConfirmedOnly
	}
	if !a.unableGather.Take(r.Unable, r.UnableSum) {
		return false
	}
	unable := a.unableGather.Items()
	klog.V(2).InfoS("Agent's abilities changed", "node", node, "unable", unable, "whole", a.unableGather.Whole(), "before", a.unable)
	a.unable = unable
	return true
}

// Expedite has the agents of nodes probed now rather than in their next slot, or at once
// after the probe out if that one was sent already: their duty changed, and the request
// carries its digest. A new announcer whose own view it cannot trust learns it within a
// round trip of the verdict instead of within an interval.
func (p *Prober) Expedite(nodes []string) {
	p.mu.Lock()
	s := p.sched
	agents := make([]*agentProbe, 0, len(nodes))
	for _, n := range nodes {
		if a := p.agents[n]; a != nil {
			agents = append(agents, a)
		}
	}
	p.mu.Unlock()
	if s == nil || len(agents) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, a := range agents {
		if s.agents[a] {
			s.bringForwardLocked(a, now, now)
		}
	}
	dutiesExpedited.Add(float64(len(agents)))
}
