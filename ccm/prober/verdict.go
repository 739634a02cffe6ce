package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// adoptedLocked reports whether node's agent and another agent agree that the other
// stands in for it: while no ccm was heard, the other took its addresses over and it
// stood down. A new leader keeps it so, as the announcer keeps what it moved itself.
// Neither side alone is taken at its word: an agent that was cut off took its
// unreachable peers for down, and must move nothing once it is back.
func (p *Prober) adoptedLocked(node string) bool {
	a := p.agents[node]
	return a != nil && a.standsDown && p.covered[a.tag] > 0
}

// CoveredBy returns the agents whose replies say they stand in for node, sorted.
func (p *Prober) CoveredBy(node string) []string {
	tag := probe.NodeTag(node)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, a := range p.agents {
		if _, ok := slices.BinarySearch(a.covers, tag); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Held is the resourceVersion SetReplaced gives a node whose addresses' annotations
// still name it: no agent's cache reaches it.
const Held = ^uint64(0)

// SetReplaced sets the nodes the announcer moved addresses away from while they were down,
// each with the resourceVersion its agent's Service cache must reach before it may
// announce again (Held while the annotations still name it). Until then it stays in the
// verdict, and Replaced while it answers, so that no address goes back to it before it
// knows where the addresses went. An agent that reports no cache version is let go once
// the annotations no longer name it.
func (p *Prober) SetReplaced(nodes map[string]uint64) {
	p.mu.Lock()
	if maps.Equal(nodes, p.replaced) {
		p.mu.Unlock()
		return
	}
	touched := slices.Collect(maps.Keys(nodes))
	touched = append(touched, slices.Collect(maps.Keys(p.replaced))...)
	before := p.healthOf(touched)
	p.replaced = maps.Clone(nodes)
	var changed []string
	for n, was := range before {
		if p.healthLocked(n) != was {
			changed = append(changed, n)
		}
	}
	p.decideLocked()
	listeners := p.listeners
	p.mu.Unlock()
	p.notify(listeners, changed)
}

// replacedLocked reports whether node is replaced: its agent's cache has not reached the
// resourceVersion SetReplaced gave it.
func (p *Prober) replacedLocked(node string) bool {
	v, ok := p.replaced[node]
	if !ok {
		return false
	}
	a := p.agents[node]
	if v != Held && (a == nil || a.cacheVersion == 0) {
		return false
	}
	return a == nil || a.cacheVersion < v
}

// Verdict returns the verdict sent to the agents; its Seq is 0 before the first.
func (p *Prober) Verdict() probe.Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.verdict
}

// verdictWire is a verdict's datagrams, signed once however many agents it goes to.
type verdictWire struct {
	ref   probe.VerdictRef
	parts [][]byte
}

// verdictParts returns the datagrams of the verdict to send, or nil when there is none
// yet. They are made once per verdict: a signature costs more than the datagram's send.
func (p *Prober) verdictParts() (probe.VerdictRef, [][]byte) {
	p.mu.Lock()
	v := p.verdict
	p.mu.Unlock()
	if v.Seq == 0 {
		return v.VerdictRef, nil
	}
	if w := p.verdictWire.Load(); w != nil && w.ref == v.VerdictRef {
		return v.VerdictRef, w.parts
	}
	parts, err := p.key.AppendVerdict(p.signer, v)
	if err != nil {
		klog.ErrorS(err, "Cannot send the verdict", "down", len(v.Down))
		return v.VerdictRef, nil
	}
	p.verdictWire.Store(&verdictWire{ref: v.VerdictRef, parts: parts})
	return v.VerdictRef, parts
}

// answered takes what an agent's reply says of the verdict, of itself and of the nodes
// it stands in for, and reports whether the agent should be sent the verdict again.
func (p *Prober) answered(node string, a *agentProbe, r probe.Reply) bool {
	p.mu.Lock()
	var changed []string
	if p.agents[node] == a {
		changed = p.takeReplyLocked(node, a, r)
	}
	stale := p.verdict.Seq != 0 && r.Verdict != p.verdict.VerdictRef
	untaken := p.untakenLocked(a, stale)
	listeners := p.listeners
	p.mu.Unlock()
	p.notify(listeners, changed)
	if untaken {
		// Sent again after every reply, and still not taken: not a lost datagram.
		p.verdictLog.Log("Agent does not take the ccm's verdicts: its --verdict-public-key-file must hold the public key of the ccm's --verdict-key-file (the agent logs and counts them as unsigned)",
			"node", node, "holds", r.Verdict, "sent", p.Verdict().VerdictRef)
	}
	return stale
}

// verdictUntakenAfter is how long an agent may hold an older verdict than the one sent,
// sent again after each of its replies, before the ccm says so: far longer than a loss.
const verdictUntakenAfter = 2 * time.Second

// untakenLocked follows how long a's replies have held an older verdict than the one sent,
// and reports whether it is longer than verdictUntakenAfter.
func (p *Prober) untakenLocked(a *agentProbe, stale bool) bool {
	if !stale {
		a.staleSince = time.Time{}
		return false
	}
	now := time.Now()
	if a.staleSince.IsZero() {
		a.staleSince = now
	}
	return now.Sub(a.staleSince) > verdictUntakenAfter
}

// takeReplyLocked records the cache version, covers and stand-down flag of a's reply, and
// returns the nodes the listeners must hear of: node itself when its cache caught up, its
// covers changed or its lists were
// first known whole, and the nodes whose health its covers changed.
func (p *Prober) takeReplyLocked(node string, a *agentProbe, r probe.Reply) []string {
	var changed []string
	a.answers++
	a.turns = probe.TurnsToWhole(r.CoverSum, r.UnableSum)
	if a.cacheVersion != r.CacheVersion {
		was := p.replacedLocked(node)
		a.cacheVersion = r.CacheVersion
		if was && !p.replacedLocked(node) {
			// Its cache has caught up with the annotations: it may announce again.
			klog.V(2).InfoS("Agent has seen where its addresses went", "node", node, "cacheVersion", r.CacheVersion)
			changed = append(changed, node)
		}
	}
	if a.coverGather.Take(r.Covers, r.CoverSum) || a.standsDown != r.StandsDown {
		covers := a.coverGather.Items()
		klog.V(2).InfoS("Agent stands in for other nodes", "node", node, "covers", len(covers), "whole", a.coverGather.Whole(), "standsDown", r.StandsDown, "before", len(a.covers))
		before := p.healthOf(p.namesOf(append(slices.Clone(a.covers), covers...)))
		p.setCoversLocked(a, covers)
		a.standsDown = r.StandsDown
		changed = append(changed, node)
		for n, s := range before {
			if n != node && p.healthLocked(n) != s {
				changed = append(changed, n)
			}
		}
	}
	if p.takeAbilityLocked(node, a, r) {
		changed = append(changed, node)
	}
	if p.pending[node] && a.applied > 0 && (a.listsKnown() || a.answers > 2*a.turns+2) {
		// Its state was published while its lists were not whole yet: a new leader waits
		// for them, as a node it takes for adopted or unable moves nothing meanwhile, but
		// not for ever, should the agent never send a whole list.
		delete(p.pending, node)
		changed = append(changed, node)
	}
	if len(changed) > 0 {
		p.decideLocked()
	}
	return slices.Compact(changed)
}

// setCoversLocked records the NodeTags of the nodes an agent stands in for.
func (p *Prober) setCoversLocked(a *agentProbe, covers []uint64) {
	for _, n := range a.covers {
		if p.covered[n]--; p.covered[n] <= 0 {
			delete(p.covered, n)
		}
	}
	for _, n := range covers {
		p.covered[n]++
	}
	a.covers = covers
}

// namesOf returns the names of the probed nodes among tags: those not probed have no
// health to change.
func (p *Prober) namesOf(tags []uint64) []string {
	var out []string
	for _, t := range tags {
		if n, ok := p.names[t]; ok {
			out = append(out, n)
		}
	}
	return out
}

// listsKnown reports whether a whole list of each kind has arrived from a's agent since it
// was last taken for down: until then, what it stands in for and what it cannot announce
// may lack some.
func (a *agentProbe) listsKnown() bool {
	return a.coverGather.Whole() && a.unableGather.Whole()
}

func (p *Prober) healthOf(nodes []string) map[string]liveness.State {
	out := map[string]liveness.State{}
	for _, n := range nodes {
		out[n] = p.healthLocked(n)
	}
	return out
}

// decideLocked makes the verdict anew: the nodes whose agent is down, or replaced. A
// changed verdict is sent to every agent at once. Before the prober has synced there is
// no verdict: the agents keep the one they hold.
func (p *Prober) decideLocked() {
	if p.ctx == nil || len(p.pending) > 0 {
		return
	}
	var down []string
	for name, a := range p.agents {
		// A starting agent announces nothing yet: its standbys must.
		if a.state == liveness.Down || a.state == liveness.Starting || p.outOfService[name] || p.replacedLocked(name) || p.adoptedLocked(name) {
			down = append(down, name)
		}
	}
	slices.Sort(down)
	if p.verdict.Seq != 0 && slices.Equal(down, p.verdict.Down) {
		return
	}
	p.verdict = probe.Verdict{VerdictRef: probe.VerdictRef{Instance: p.instance, Seq: p.verdict.Seq + 1}, Down: down}
	// Until it is sent, the replies to probes sent meanwhile hold the verdict before; an
	// interval is far more than sending it to thousands takes, and bounds the wait of an
	// agent that missed it should the broadcast not come.
	p.broadcast.Store(&broadcastMark{ref: p.verdict.VerdictRef, at: time.Now().Add(p.cfg.ProbeInterval)})
	verdictDown.Set(float64(len(down)))
	klog.V(2).InfoS("Verdict changed", "seq", p.verdict.Seq, "down", few(down))
	select {
	case p.verdictDue <- struct{}{}:
	default: // a send is due already, and takes the latest verdict
	}
}

// broadcastMark is the verdict last decided, and when its broadcast to every agent ended,
// or is due to have ended.
type broadcastMark struct {
	ref probe.VerdictRef
	at  time.Time
}

// broadcastDone records that the broadcast of ref ended, unless a newer verdict was
// decided meanwhile.
func (p *Prober) broadcastDone(ref probe.VerdictRef) {
	if m := p.broadcast.Load(); m != nil && m.ref == ref {
		p.broadcast.CompareAndSwap(m, &broadcastMark{ref: ref, at: time.Now()})
	}
}

// missedBroadcast reports whether an agent whose reply to a probe sent at sent holds an
// older verdict than ref missed ref's broadcast: the probe left after it. A probe that
// left before may have reached the agent first, as most do while thousands of verdicts
// go out: sending the verdict again to each would double what every agent must check
// (and the ccm send); the agent's next reply says whether it lacks it still.
func (p *Prober) missedBroadcast(ref probe.VerdictRef, sent time.Time) bool {
	m := p.broadcast.Load()
	return m == nil || m.ref != ref || sent.After(m.at)
}

// few returns at most 10 names, for logs.
func few(names []string) []string { return names[:min(len(names), 10)] }

// notify tells the listeners of the nodes whose health changed.
func (p *Prober) notify(listeners []func(string), nodes []string) {
	for _, n := range nodes {
		for _, f := range listeners {
			f(n)
		}
	}
}
