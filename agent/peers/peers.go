// Package peers is an agent's check of the peers it backs up, while no ccm is heard: it
// probes their agents with the requests the ccm sends (package probe, as FromAgent) and
// judges each by the rule the ccm judges by (package liveness), with the same signs of
// life: an echo answered by a peer's kernel makes a miss a busy one, a port unreachable
// a refused one.
//
// An agent backs up a few peers at most, so each is probed by a goroutine of its own from
// one socket; the ccm's prober, which probes thousands, batches them (ccm/prober).
package peers

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Agent is what is known of a peer's agent.
type Agent struct {
	// Address is where the agent is probed.
	Address netip.AddrPort
	// LastAnswer is when the last answer arrived; zero before any.
	LastAnswer time.Time
	// CacheVersion is the resourceVersion the agent's last reply said its Service cache
	// has reached.
	CacheVersion uint64
}

// Prober probes the agents of the peers it is given (SetTargets) while it runs. It is
// safe for concurrent use.
type Prober struct {
	cfg         config.Failover
	key         *probe.Key
	nodes       corelisters.NodeLister
	nodesSynced cache.InformerSynced

	mu        sync.Mutex
	run       *run // the current Run's; nil between runs
	targets   map[string]bool
	peers     map[string]*peer
	listeners []func(node string)
}

// New returns a prober of the agents of the peers among the nodes of the informer, with
// requests authenticated by key. It probes nothing before Run, and only the targets.
func New(cfg config.Failover, key *probe.Key, nodes coreinformers.NodeInformer) *Prober {
	p := &Prober{cfg: cfg, key: key, nodes: nodes.Lister(), nodesSynced: nodes.Informer().HasSynced, targets: map[string]bool{}, peers: map[string]*peer{}}
	err := liveness.FollowNodes(nodes.Informer(), p.syncNode, func(name string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.forgetLocked(name)
	})
	if err != nil {
		panic(err) // only once the informer has stopped
	}
	return p
}

// Health returns what is known of node's agent: Down for a node not probed.
func (p *Prober) Health(node string) liveness.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.peers[node]; pr != nil {
		return pr.state
	}
	return liveness.Down
}

// OnChange registers f to be called with the name of a peer whose agent changed state, or
// changed the nodes it says it stands in for.
func (p *Prober) OnChange(f func(node string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listeners = append(p.listeners, f)
}

// SetTargets sets the peers to probe.
func (p *Prober) SetTargets(nodes map[string]bool) {
	p.mu.Lock()
	if maps.Equal(nodes, p.targets) {
		p.mu.Unlock()
		return
	}
	p.targets = maps.Clone(nodes)
	for name := range p.peers {
		if !p.targets[name] {
			p.forgetLocked(name)
		}
	}
	p.mu.Unlock()
	p.syncTargets()
}

// CoveredBy returns the peers whose replies say they stand in for node, sorted.
func (p *Prober) CoveredBy(node string) []string {
	tag := probe.NodeTag(node)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, pr := range p.peers {
		if _, ok := slices.BinarySearch(pr.covers, tag); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Agents returns what is known of every peer probed now, by node name: a copy.
func (p *Prober) Agents() map[string]Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Agent, len(p.peers))
	for name, pr := range p.peers {
		out[name] = Agent{Address: pr.addr, LastAnswer: pr.lastAnswer, CacheVersion: pr.cacheVersion}
	}
	return out
}

// Run probes the targets until ctx ends, from the time the node informer has synced.
// Runs follow one another: each has its own instance, and forgets what the one before
// found.
func (p *Prober) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSync("baremetal-agent-peers", ctx.Done(), p.nodesSynced) {
		return
	}
	r := p.open(ctx)
	if r == nil {
		return
	}
	defer r.close()
	p.mu.Lock()
	for name := range p.peers {
		p.forgetLocked(name) // probed by an earlier run
	}
	p.run = r
	p.mu.Unlock()
	go r.read()
	if r.echo != nil {
		r.echo.Read(r.echoed)
	}
	p.syncTargets()
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != r {
		return // a later Run probes now
	}
	for name := range p.peers {
		p.forgetLocked(name)
	}
	p.run = nil
}

// open returns the run of ctx with its sockets open, trying again with backoff until it
// can, or nil when ctx ends first.
func (p *Prober) open(ctx context.Context) *run {
	for wait := p.cfg.ProbeInterval; ; wait = min(2*wait, liveness.MaxBackoffIntervals*p.cfg.ProbeInterval) {
		r, err := newRun(ctx, p)
		if err == nil {
			return r
		}
		klog.ErrorS(err, "Cannot open the socket to probe peers from; trying again", "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// syncTargets starts probing every target the node lister holds.
func (p *Prober) syncTargets() {
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list the nodes to probe peers of")
		return
	}
	for _, n := range nodes {
		p.syncNode(n)
	}
}

// syncNode starts probing a node that is a target, or probing it at its new address.
// Between runs it does nothing.
func (p *Prober) syncNode(n *v1.Node) {
	addr, ok := liveness.AgentAddrPort(n, p.cfg.AgentPort)
	p.mu.Lock()
	if p.run == nil || p.run.ctx.Err() != nil || !p.targets[n.Name] {
		p.mu.Unlock()
		return
	}
	if pr := p.peers[n.Name]; pr != nil && pr.addr == addr {
		p.mu.Unlock()
		return
	}
	p.forgetLocked(n.Name)
	if !ok {
		p.mu.Unlock()
		klog.InfoS("Peer has no InternalIP to probe its agent at; taking it for down", "node", n.Name)
		p.notify(n.Name)
		return
	}
	pr := newPeer(n.Name, addr)
	p.peers[n.Name] = pr
	go p.run.probe(pr)
	p.mu.Unlock()
}

// forgetLocked stops probing node, if it is probed. p.mu is held.
func (p *Prober) forgetLocked(node string) {
	if pr := p.peers[node]; pr != nil {
		close(pr.stop)
		delete(p.peers, node)
		if p.run != nil {
			p.run.forgetLocked(pr)
		}
	}
}

// notify tells the listeners that node changed. p.mu is not held.
func (p *Prober) notify(node string) {
	p.mu.Lock()
	listeners := p.listeners
	p.mu.Unlock()
	for _, f := range listeners {
		f(node)
	}
}
