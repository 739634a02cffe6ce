// Package prober is the ccm's check of the node agents: it probes every node's agent with
// the authenticated UDP requests of package probe, judges each by the rule of package
// liveness, and sends every agent the verdict, the nodes taken for down, and each its
// duty. It batches the probes of thousands of agents over a few sockets, probes the
// agents no plan names at an idle rate, and tells its own isolation from the agents'
// deaths.
package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Prober checks every node's agent with UDP probes (package probe) every probe interval
// and is the announcer's source of agent health. Its cost is two small packets per node
// and interval, and nothing through the API server.
//
// The ccm's prober (probe.FromCCM) also sends every agent the verdict: the nodes taken
// for down, or stood in for. It sends it to every agent at once when it changes, and
// again to an agent whose reply shows it holds an older one. (An agent checks the peers it
// backs up while no ccm is heard with a prober of its own: agent/peers.)
type Prober struct {
	cfg config.Failover
	key *probe.Key
	// signer signs the verdicts and duty lists.
	signer      *probe.Signer
	nodes       corelisters.NodeLister
	nodesSynced cache.InformerSynced

	mu        sync.Mutex
	ctx       context.Context // Run's; nil before Run
	agents    map[string]*agentProbe
	listeners []func(node string)
	// pending are the nodes there were at the start without a verdict yet; the prober
	// has synced when there are none left, so that a new leader changes nothing before
	// it knows which agents answer, and which stand in for others.
	pending map[string]bool
	// instance is chosen at random when Run starts, and stamped on the requests and
	// verdicts: an agent's replay window is per instance, and it follows one ccm instance.
	instance uint64
	// verdict is the verdict sent; its Seq is 0 until the prober has synced.
	verdict probe.Verdict
	// verdictWire holds the datagrams of the verdict last sent.
	verdictWire atomic.Pointer[verdictWire]
	// broadcast is the verdict last decided and when it was sent to every agent: an
	// agent whose reply to a probe sent after that holds an older one missed it.
	broadcast atomic.Pointer[broadcastMark]
	// dutySeq numbers the duty lists made, for any node: an agent takes none older than
	// the one it holds.
	dutySeq atomic.Uint64
	// dutyWire holds, per node, the datagrams of the duty list last sent to it.
	dutyWire sync.Map
	// outOfService are the nodes with the taint node.kubernetes.io/out-of-service: an
	// operator says they are down, so they are, whatever their agents answer and whatever
	// the isolation guard holds (outofservice.go).
	outOfService map[string]bool
	// replaced are the nodes the announcer moved addresses away from while they were
	// down (SetReplaced), with the resourceVersion their agents' Service caches must reach
	// before they may announce again.
	replaced map[string]uint64
	// covered counts, per NodeTag, the agents whose replies say they stand in for the
	// node, and names are the probed nodes by NodeTag: replies name covered nodes by tag.
	covered map[uint64]int
	names   map[uint64]string
	// duties, if set, say what each agent should announce.
	duties Duties
	// sched probes the agents of the current Run; nil before Run.
	sched *sched
	// verdictDue asks Run's sender to send the verdict to every agent.
	verdictDue   chan struct{}
	isoListeners []func(Isolation)
	authLog      probe.AuthLog
	// verdictLog logs agents that do not take the verdict sent them.
	verdictLog probe.AuthLog
}

// agentProbe is the probing of one node's agent.
type agentProbe struct {
	node string
	addr netip.AddrPort
	// sock is the scheduler's socket the agent is probed from.
	sock int
	// state is the agent's state, as the scheduler last published it; applied the
	// sequence of that publication. Both under p.mu.
	state   liveness.State
	applied uint64
	// covers are the NodeTags of the nodes the agent's replies say it stands in for, as
	// coverGather puts them together from the shares replies carry; standsDown whether
	// its last reply said it takes itself for down, and cacheVersion the resourceVersion
	// it said its Service cache has reached.
	covers       []uint64
	coverGather  *probe.Gather[uint64]
	standsDown   bool
	cacheVersion uint64
	// unable are the pools and families the agent cannot announce, as unableGather puts
	// them together, and confirmedOnly whether it announces only what the ccm confirms.
	unable        []probe.Unable
	unableGather  *probe.Gather[probe.Unable]
	confirmedOnly bool
	// answers counts the replies taken, and turns how many consecutive ones carry every
	// share of the agent's lists, as its last reply said: the wait for whole lists is
	// bounded by them.
	answers, turns int
	// lastRTT (ns) and lastAnswer (Unix ns) are the last answered probe's round trip and
	// arrival, for the status page. Atomics, because the readers write them on every
	// answer, and p.mu is on the path of every announcer decision.
	lastRTT, lastAnswer atomic.Int64
	// lastProbe (Unix ns) is when the last probe ended, answered or not.
	lastProbe atomic.Int64
	// staleSince is when the agent's replies began to hold an older verdict than the one
	// sent; zero while it holds the one sent. Under p.mu.
	staleSince time.Time
	// tag is the node's probe.NodeTag, counter the last counter of a request to it, and
	// challenge the challenge of its agent's last reply, which the next request echoes.
	tag                uint64
	counter, challenge atomic.Uint64
	// takesIdle says the agent's last reply said it takes requests with the idle flag.
	takesIdle atomic.Bool
	slot
}

// New returns a prober of the agents of the nodes in the informer, with probes
// authenticated by key, its verdicts and duty lists signed with signer. It probes nothing
// before Run.
func New(cfg config.Failover, key *probe.Key, signer *probe.Signer, nodes coreinformers.NodeInformer) *Prober {
	if signer == nil {
		panic("prober.New: the ccm's prober needs a signer for its verdicts")
	}
	registerMetrics()
	p := &Prober{cfg: cfg, key: key, signer: signer, nodes: nodes.Lister(), nodesSynced: nodes.Informer().HasSynced, agents: map[string]*agentProbe{}, outOfService: map[string]bool{}, replaced: map[string]uint64{}, covered: map[uint64]int{}, names: map[uint64]string{}, verdictDue: make(chan struct{}, 1)}
	err := liveness.FollowNodes(nodes.Informer(), p.syncNode, func(name string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.forget(name)
		delete(p.pending, name)
		delete(p.outOfService, name)
		p.decideLocked()
	})
	if err != nil {
		panic(err)
	}
	return p
}

// Health returns what is known of node's agent.
func (p *Prober) Health(node string) liveness.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthLocked(node)
}

func (p *Prober) healthLocked(node string) liveness.State {
	a := p.agents[node]
	switch {
	case a == nil || p.outOfService[node]:
		return liveness.Down
	case a.state != liveness.Down && (p.replacedLocked(node) || p.adoptedLocked(node)):
		return liveness.Replaced
	}
	return a.state
}

// OnChange registers f to be called with the name of a node whose agent changed state.
func (p *Prober) OnChange(f func(node string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listeners = append(p.listeners, f)
}

// HasSynced reports whether every node there was at the start has a verdict.
func (p *Prober) HasSynced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx != nil && len(p.pending) == 0
}

// Run probes until ctx ends, from the time the node informer has synced.
func (p *Prober) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSync("baremetal-agent-prober", ctx.Done(), p.nodesSynced) {
		return
	}
	s := p.openSockets(ctx)
	if s == nil {
		return
	}
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list nodes to probe")
	}
	p.mu.Lock()
	for name := range p.agents {
		p.forget(name) // a probe of an earlier Run
	}
	p.ctx, p.sched = ctx, s
	// Random, not the time: a value that orders ccms would let one with its clock ahead,
	// or one forged datagram, make the agents ignore every later ccm.
	p.instance = probe.NewInstance()
	p.pending = map[string]bool{}
	for _, n := range nodes {
		p.pending[n.Name] = true
	}
	p.mu.Unlock()
	for _, n := range nodes {
		p.syncNode(n)
	}
	go s.run(ctx)
	for {
		select {
		case <-p.verdictDue:
			p.mu.Lock()
			to := make([]*agentProbe, 0, len(p.agents))
			for _, a := range p.agents {
				to = append(to, a)
			}
			current := p.sched == s
			p.mu.Unlock()
			if current {
				s.broadcast(to)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx != ctx {
		return // a later Run probes now
	}
	for name := range p.agents {
		p.forget(name)
	}
}

// openSockets returns the scheduler of a Run with its sockets open, trying again with
// backoff until it can, or nil when ctx ends first.
func (p *Prober) openSockets(ctx context.Context) *sched {
	for wait := p.cfg.ProbeInterval; ; wait = min(2*wait, liveness.MaxBackoffIntervals*p.cfg.ProbeInterval) {
		s, err := newSched(p)
		if err == nil {
			return s
		}
		klog.ErrorS(err, "Cannot open the sockets to probe agents from; trying again", "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// forget stops probing a node, if it is probed. p.mu is held.
func (p *Prober) forget(node string) {
	a := p.agents[node]
	if a == nil {
		return
	}
	p.sched.remove(a)
	agentsByState.WithLabelValues(a.state.String()).Dec()
	p.setCoversLocked(a, nil)
	delete(p.agents, node)
	if p.names[a.tag] == node {
		delete(p.names, a.tag)
	}
	p.decideLocked()
}

// syncNode starts probing a node, or probing it at its new address. Before Run, it does
// nothing: Run starts every node.
func (p *Prober) syncNode(n *v1.Node) {
	p.syncOutOfService(n)
	addr, ok := liveness.AgentAddrPort(n, p.cfg.AgentPort)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.ctx.Err() != nil {
		return
	}
	if a := p.agents[n.Name]; a != nil && a.addr == addr {
		return
	}
	p.forget(n.Name)
	if !ok {
		klog.InfoS("Node has no InternalIP to probe its agent at; it announces nothing", "node", n.Name)
		delete(p.pending, n.Name)
		p.decideLocked() // it may have been the last one the first verdict waited for
		return
	}
	a := &agentProbe{node: n.Name, addr: addr, sock: socketOf(n.Name, len(p.sched.conns)), tag: probe.NodeTag(n.Name), coverGather: probe.NewCoverGather(), unableGather: probe.NewUnableGather()}
	p.agents[n.Name] = a
	p.names[a.tag] = n.Name
	agentsByState.WithLabelValues(liveness.Unknown.String()).Inc()
	p.sched.add(a)
}

// transition records the new state of a node's agent as the scheduler published it with
// sequence seq, and tells the listeners. A probe replaced meanwhile (the node gone, or at a
// new address) has no say, nor has a publication overtaken by a later one.
func (p *Prober) transition(node string, a *agentProbe, s liveness.State, o liveness.Outcome, rtt time.Duration, seq uint64) {
	p.mu.Lock()
	if p.agents[node] != a || seq <= a.applied {
		p.mu.Unlock()
		return
	}
	a.applied = seq
	agentsByState.WithLabelValues(a.state.String()).Dec()
	agentsByState.WithLabelValues(s.String()).Inc()
	a.state = s
	if s == liveness.Down || a.listsKnown() {
		delete(p.pending, node)
	}
	changed := []string{node}
	if s == liveness.Down {
		// A dead agent stands in for no one; if it answers again, its lists are gathered
		// anew.
		a.coverGather = probe.NewCoverGather()
	}
	if s == liveness.Down && len(a.covers) > 0 {
		before := p.healthOf(p.namesOf(a.covers))
		p.setCoversLocked(a, nil)
		for n, was := range before {
			if p.healthLocked(n) != was {
				changed = append(changed, n)
			}
		}
	}
	p.decideLocked()
	listeners := p.listeners
	p.mu.Unlock()
	agentTransitions.WithLabelValues(s.String()).Inc()
	klog.InfoS("Agent state changed", "node", node, "state", s, "lastProbe", o, "rtt", rtt)
	p.notify(listeners, changed)
}
