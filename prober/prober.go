// Package prober checks node agents with the authenticated UDP probes of package probe:
// the ccm probes every node and sends every agent its verdict, the nodes taken for down;
// an agent probes the peers of its plans while no ccm is heard.
package prober

import (
	"context"
	"maps"
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

// State is what the prober knows of a node's agent.
type State int

// The states of an agent.
const (
	// Unknown: not probed long enough to say.
	Unknown State = iota
	// Up: answering, ready.
	Up
	// Down: not answering (or the node has no address to probe).
	Down
	// Draining: answering, but shutting down.
	Draining
	// Starting: answering, but not ready to announce (its Service cache has not synced):
	// in the verdict, so that its standbys announce what it would.
	Starting
	// Replaced: answering, but the announcer moved addresses away from it while it was
	// down and the Services' annotations still name it (the API server is away, or the
	// patches are on their way). It stays in the verdict, so that it announces nothing
	// and its standbys keep what they took, until the annotations caught up (SetReplaced).
	Replaced
)

// String returns the state in lower case, as in metrics labels.
func (s State) String() string {
	return [...]string{"unknown", "up", "down", "draining", "starting", "replaced"}[s]
}

// Prober checks every node's agent with UDP probes (package probe) every probe interval
// and is the announcer's source of agent health. Its cost is two small packets per node
// and interval, and nothing through the API server.
//
// The ccm's prober (probe.FromCCM) also sends every agent the verdict: the nodes taken
// for down, or stood in for. It sends it to every agent at once when it changes, and
// again to an agent whose reply shows it holds an older one. An agent's prober
// (probe.FromAgent) checks the peers it backs up while no ccm is heard.
type Prober struct {
	cfg config.Failover
	key *probe.Key
	// signer signs the verdicts and duty lists of the ccm's prober; nil for an agent's.
	signer      *probe.Signer
	sender      probe.Sender
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
	// targets limits the nodes probed; nil probes every node.
	targets map[string]bool
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
	state   State
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
// authenticated by key, sent as sender. The ccm's prober signs its verdicts and duty lists
// with signer; an agent's sends neither, and takes nil. It probes nothing before Run.
func New(cfg config.Failover, key *probe.Key, signer *probe.Signer, nodes coreinformers.NodeInformer, sender probe.Sender) *Prober {
	if sender == probe.FromCCM && signer == nil {
		panic("prober.New: the ccm's prober needs a signer for its verdicts")
	}
	if sender == probe.FromCCM {
		// An agent's prober has no metrics of its own: an unregistered metric counts nothing.
		registerMetrics()
	}
	p := &Prober{cfg: cfg, key: key, signer: signer, sender: sender, nodes: nodes.Lister(), nodesSynced: nodes.Informer().HasSynced, agents: map[string]*agentProbe{}, replaced: map[string]uint64{}, covered: map[uint64]int{}, names: map[uint64]string{}, verdictDue: make(chan struct{}, 1)}
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.syncNode,
		UpdateFunc: func(_, cur any) { p.syncNode(cur) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				p.mu.Lock()
				defer p.mu.Unlock()
				p.forget(n.Name)
				delete(p.pending, n.Name)
				p.decideLocked()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	return p
}

// Health returns what is known of node's agent.
func (p *Prober) Health(node string) State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthLocked(node)
}

func (p *Prober) healthLocked(node string) State {
	a := p.agents[node]
	switch {
	case a == nil:
		return Down
	case a.state != Down && (p.replacedLocked(node) || p.adoptedLocked(node)):
		return Replaced
	}
	return a.state
}

// SetTargets limits probing to the named nodes; nil probes every node.
func (p *Prober) SetTargets(nodes map[string]bool) {
	p.mu.Lock()
	if maps.Equal(nodes, p.targets) && (nodes == nil) == (p.targets == nil) {
		p.mu.Unlock()
		return
	}
	p.targets = maps.Clone(nodes)
	for name := range p.agents {
		if p.targets != nil && !p.targets[name] {
			p.forget(name)
		}
	}
	p.mu.Unlock()
	if nodes, err := p.nodes.List(labels.Everything()); err == nil {
		for _, n := range nodes {
			p.syncNode(n)
		}
	}
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
		if p.targets == nil || p.targets[n.Name] {
			p.pending[n.Name] = true
		}
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
	for wait := p.cfg.ProbeInterval; ; wait = min(2*wait, maxBackoffIntervals*p.cfg.ProbeInterval) {
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
func (p *Prober) syncNode(obj any) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	addr, ok := agentAddress(n, p.cfg.AgentPort)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.ctx.Err() != nil {
		return
	}
	if a := p.agents[n.Name]; a != nil && a.addr == addr {
		return
	}
	if p.targets != nil && !p.targets[n.Name] {
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
	agentsByState.WithLabelValues(Unknown.String()).Inc()
	p.sched.add(a)
}

// transition records the new state of a node's agent as the scheduler published it with
// sequence seq, and tells the listeners. A probe replaced meanwhile (the node gone, or at a
// new address) has no say, nor has a publication overtaken by a later one.
func (p *Prober) transition(node string, a *agentProbe, s State, o outcome, rtt time.Duration, seq uint64) {
	p.mu.Lock()
	if p.agents[node] != a || seq <= a.applied {
		p.mu.Unlock()
		return
	}
	a.applied = seq
	agentsByState.WithLabelValues(a.state.String()).Dec()
	agentsByState.WithLabelValues(s.String()).Inc()
	a.state = s
	if s == Down || a.listsKnown() {
		delete(p.pending, node)
	}
	changed := []string{node}
	if s == Down {
		// A dead agent stands in for no one; if it answers again, its lists are gathered
		// anew.
		a.coverGather = probe.NewCoverGather()
	}
	if s == Down && len(a.covers) > 0 {
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
