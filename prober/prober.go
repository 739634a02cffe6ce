package prober

import (
	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
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
)

// String returns the state in lower case, as in metrics labels.
func (s State) String() string {
	return [...]string{"unknown", "up", "down", "draining"}[s]
}

// Prober checks every node's agent with UDP probes (package probe) every probe interval,
// from the leader only, and is the announcer's source of agent health. Its cost is two small
// packets per node and interval, and nothing through the API server.
type Prober struct {
	cfg         config.Failover
	key         *probe.Key
	nodes       corelisters.NodeLister
	nodesSynced cache.InformerSynced

	mu        sync.Mutex
	ctx       context.Context // Run's; nil before Run
	agents    map[string]*agentProbe
	listeners []func(node string)
	// pending are the nodes there were at the start without a verdict yet; the prober
	// has synced when there are none left, so that a new leader changes nothing before
	// it knows which agents answer.
	pending map[string]bool
}

// agentProbe is the probing of one node's agent.
type agentProbe struct {
	addr   netip.AddrPort
	cancel context.CancelFunc
	state  State
	// lastRTT (ns) and lastAnswer (Unix ns) are the last answered probe's round trip and
	// arrival, for the status page. Atomics, because the probe loop writes them on every
	// answer, and p.mu is on the path of every announcer decision.
	lastRTT, lastAnswer atomic.Int64
}

// New returns a prober of the agents of the nodes in the informer, with probes
// authenticated by key. It probes nothing before Run.
func New(cfg config.Failover, key *probe.Key, nodes coreinformers.NodeInformer) *Prober {
	registerMetrics()
	p := &Prober{cfg: cfg, key: key, nodes: nodes.Lister(), nodesSynced: nodes.Informer().HasSynced, agents: map[string]*agentProbe{}}
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
	if a := p.agents[node]; a != nil {
		return a.state
	}
	return Down
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
	nodes, err := p.nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list nodes to probe")
	}
	p.mu.Lock()
	p.ctx = ctx
	p.pending = map[string]bool{}
	for _, n := range nodes {
		p.pending[n.Name] = true
	}
	p.mu.Unlock()
	for _, n := range nodes {
		p.syncNode(n)
	}
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.agents {
		p.forget(name)
	}
}

// forget stops probing a node, if it is probed. p.mu is held.
func (p *Prober) forget(node string) {
	a := p.agents[node]
	if a == nil {
		return
	}
	a.cancel()
	agentsByState.WithLabelValues(a.state.String()).Dec()
	delete(p.agents, node)
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
	p.forget(n.Name)
	if !ok {
		klog.InfoS("Node has no InternalIP to probe its agent at; it announces nothing", "node", n.Name)
		delete(p.pending, n.Name)
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	a := &agentProbe{addr: addr, cancel: cancel}
	p.agents[n.Name] = a
	agentsByState.WithLabelValues(Unknown.String()).Inc()
	go p.probe(ctx, n.Name, a)
}

// agentAddress returns where node's agent answers: its first InternalIP.
func agentAddress(n *v1.Node, port int) (netip.AddrPort, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
		}
	}
	return netip.AddrPort{}, false
}

// probe probes one agent until ctx ends.
func (p *Prober) probe(ctx context.Context, node string, a *agentProbe) {
	addr := a.addr
	// A connected socket: an ICMP port unreachable, which says the node is there but its
	// agent is not, comes back as an error on it.
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		klog.ErrorS(err, "Cannot probe agent", "node", node, "address", addr)
		p.transition(node, a, Down, missed, 0)
		return
	}
	context.AfterFunc(ctx, func() { conn.Close() })

	interval := p.cfg.ProbeInterval
	// An answer may take a quarter of an interval (25 ms by default): on a LAN it takes well
	// under a millisecond. A late answer costs nothing but rapid probes; only
	// failureThreshold misses in a row take the agent for dead.
	timeout := interval / 4
	rapid := min(rapidInterval, interval)
	health := agentHealth{}
	// A fresh random nonce per probe, from a generator no one can predict: a reply can
	// then only be made, or replayed, by whoever holds the key and saw the request.
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux
	nonces := rand.NewChaCha8(seed)
	req := make([]byte, 0, probe.RequestLen)
	buf := make([]byte, probe.MaxReplyLen+1)
	next := time.Now()
	for ctx.Err() == nil {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		nonce := nonces.Uint64()
		sent := time.Now()
		probesSent.Inc()
		o := missed
		if _, err := conn.Write(p.key.AppendRequest(req[:0], probe.Request{Nonce: nonce})); err != nil {
			o = refusedOr(err, missed)
		} else {
			wait := timeout
			if health.suspect() {
				wait = rapid
			}
			o = p.await(conn, buf, nonce, node, sent.Add(wait))
		}
		var rtt time.Duration
		if o == answeredReady || o == answeredDraining {
			now := time.Now()
			rtt = now.Sub(sent)
			probeRTT.Observe(rtt.Seconds())
			a.lastRTT.Store(int64(rtt))
			a.lastAnswer.Store(now.UnixNano())
		}
		if health.observe(o, p.cfg.FailureThreshold) {
			p.transition(node, a, health.state, o, rtt)
		} else if health.misses == 1 {
			klog.V(4).InfoS("Agent missed a probe", "node", node, "outcome", o)
		}
		if health.suspect() {
			next = sent.Add(rapid)
		} else {
			next = sent.Add(interval)
		}
		if now := time.Now(); next.Before(now) {
			next = now
		}
	}
}

// await reads until the answer to nonce arrives or deadline passes. Answers to earlier
// probes, and anything malformed, are skipped.
func (p *Prober) await(conn *net.UDPConn, buf []byte, nonce uint64, node string, deadline time.Time) outcome {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return missed
	}
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return refusedOr(err, missed)
		}
		reply, err := p.key.ParseReply(buf[:n])
		if errors.Is(err, probe.ErrAuth) {
			unauthenticatedReplies.Inc()
			continue
		}
		if err != nil || reply.Nonce != nonce {
			continue
		}
		if reply.Node != node {
			// Another node's agent at this node's address: not this node's agent.
			klog.V(2).InfoS("Probe answered by another node's agent", "node", node, "answeredBy", reply.Node)
			return missed
		}
		if reply.State == probe.Draining {
			return answeredDraining
		}
		return answeredReady
	}
}

func refusedOr(err error, o outcome) outcome {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return refused
	}
	return o
}

// transition records the new state of a node's agent as probe a found it, and tells the
// listeners. A probe replaced meanwhile (the node gone, or at a new address) has no say.
func (p *Prober) transition(node string, a *agentProbe, s State, o outcome, rtt time.Duration) {
	p.mu.Lock()
	if p.agents[node] != a {
		p.mu.Unlock()
		return
	}
	agentsByState.WithLabelValues(a.state.String()).Dec()
	agentsByState.WithLabelValues(s.String()).Inc()
	a.state = s
	delete(p.pending, node)
	listeners := p.listeners
	p.mu.Unlock()
	agentTransitions.WithLabelValues(s.String()).Inc()
	klog.InfoS("Agent state changed", "node", node, "state", s, "lastProbe", o, "rtt", rtt)
	for _, f := range listeners {
		f(node)
	}
}

// Agent is what the prober knows of the probing of one node's agent.
type Agent struct {
	// Address is where the agent is probed.
	Address netip.AddrPort
	// LastRTT is the round trip of the last answered probe; 0 before any answer.
	LastRTT time.Duration
	// LastAnswer is when the last answer arrived; zero before any answer.
	LastAnswer time.Time
}

// Agents returns the probing of every agent probed now, by node name: a copy, for the
// status page.
func (p *Prober) Agents() map[string]Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Agent, len(p.agents))
	for node, a := range p.agents {
		pr := Agent{Address: a.addr, LastRTT: time.Duration(a.lastRTT.Load())}
		if at := a.lastAnswer.Load(); at != 0 {
			pr.LastAnswer = time.Unix(0, at)
		}
		out[node] = pr
	}
	return out
}
