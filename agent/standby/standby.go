// Package standby is the agent's view of which nodes are down, and its own check of the
// nodes it backs up while no ccm is heard.
//
// The ccm's verdict, taken by the probe responder, names the nodes taken for down; an
// agent announces the addresses of a Service whose plan (announcer, then standbys) it is
// the first live node of. When no ccm has been heard for a probe interval and a half (the
// leader died, perhaps with the node it ran on; an election is under way; the API server
// is away and no ccm leads), the agent probes the nodes ahead of it in the plans, with
// the same authenticated probes, and takes a node that fails them for down too, until a
// ccm's next verdict says otherwise. Only the nodes a standby backs up are probed, and
// only while no ccm is heard.
package standby

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/prober"
)

// Responder is what Standby needs of the probe responder: a *probe.Responder.
type Responder interface {
	Verdict() probe.Verdict
	LastCCM() time.Time
	OnVerdict(func())
	SetCovers([]string)
}

// Peers is what Standby needs of its prober of peers: a *prober.Prober of probe.FromAgent.
type Peers interface {
	Run(ctx context.Context)
	Health(node string) prober.State
	OnChange(func(node string))
	SetTargets(map[string]bool)
}

// Standby says which nodes are down, from the ccm's verdict and, while no ccm is heard,
// from its own probes of the nodes ahead of this one. It is safe for concurrent use.
type Standby struct {
	interval  time.Duration
	responder Responder
	peers     Peers

	mu        sync.Mutex
	verdict   probe.VerdictRef
	down      map[string]bool // the verdict's, and the peers found down since
	ahead     map[string]bool
	silent    bool
	listeners []func()
}

var (
	ccmSilent = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "baremetal_agent",
		Name:           "ccm_silent",
		Help:           "1 while no ccm has been heard for a probe interval and a half, and the agent checks the nodes it backs up itself; else 0.",
		StabilityLevel: metrics.ALPHA,
	})
	downNodes = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "baremetal_agent",
		Name:           "down_nodes",
		Help:           "Nodes this agent takes for down: named by the ccm's verdict, or found down by its own probes while no ccm was heard.",
		StabilityLevel: metrics.ALPHA,
	})
	peersFoundDown = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "baremetal_agent",
		Name:           "peers_found_down_total",
		Help:           "Nodes this agent backs up that failed its own probes while no ccm was heard.",
		StabilityLevel: metrics.ALPHA,
	})
)

// Metrics returns the collectors of this package, to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{ccmSilent, downNodes, peersFoundDown}
}

// New returns a Standby over the verdicts responder takes, checking peers with peers,
// for probes every cfg.ProbeInterval.
func New(cfg config.Failover, responder Responder, peers Peers) *Standby {
	s := &Standby{interval: cfg.ProbeInterval, responder: responder, peers: peers, down: map[string]bool{}, ahead: map[string]bool{}}
	responder.OnVerdict(s.takeVerdict)
	peers.OnChange(s.peerChanged)
	peers.SetTargets(map[string]bool{})
	return s
}

// Down reports whether node is down.
func (s *Standby) Down(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down[node]
}

// Snapshot returns a copy of the nodes taken for down: one view for a whole computation.
func (s *Standby) Snapshot() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.down)
}

// OnChange registers f to be called whenever the nodes taken for down change.
func (s *Standby) OnChange(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
}

// SetAhead sets the nodes ahead of this one in the plans: those it checks while no ccm is
// heard.
func (s *Standby) SetAhead(nodes []string) {
	ahead := map[string]bool{}
	for _, n := range nodes {
		ahead[n] = true
	}
	s.mu.Lock()
	s.ahead = ahead
	silent := s.silent
	s.mu.Unlock()
	if silent {
		s.peers.SetTargets(ahead)
	}
}

// SetCovers tells the ccm, in the following replies, which nodes this agent stands in for.
func (s *Standby) SetCovers(nodes []string) { s.responder.SetCovers(nodes) }

// Run follows whether a ccm is heard until ctx ends, and checks the peers while none is.
func (s *Standby) Run(ctx context.Context) {
	silentAfter := s.interval + s.interval/2
	tick := time.NewTicker(s.interval / 4)
	defer tick.Stop()
	stopPeers := func() {}
	defer func() { stopPeers() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		last := s.responder.LastCCM()
		silent := time.Since(last) > silentAfter
		s.mu.Lock()
		changed := silent != s.silent
		s.silent = silent
		ahead := maps.Clone(s.ahead)
		s.mu.Unlock()
		if !changed {
			continue
		}
		if silent {
			ccmSilent.Set(1)
			klog.InfoS("No ccm heard; checking the nodes this one backs up", "lastHeard", last, "nodes", len(ahead))
			peerCtx, cancel := context.WithCancel(ctx)
			stopPeers = cancel
			s.peers.SetTargets(ahead)
			go s.peers.Run(peerCtx)
		} else {
			ccmSilent.Set(0)
			klog.InfoS("A ccm is heard again; no more checks of peers")
			stopPeers()
			s.peers.SetTargets(map[string]bool{})
		}
	}
}

// peerChanged takes a peer that failed this agent's probes for down, while no ccm is
// heard. A peer that comes back stays down until a ccm's verdict: only a ccm moves
// addresses back, and it learns from the agents what they did first.
func (s *Standby) peerChanged(node string) {
	if s.peers.Health(node) != prober.Down {
		return
	}
	s.mu.Lock()
	if !s.silent || s.down[node] {
		s.mu.Unlock()
		return
	}
	s.down[node] = true
	downNodes.Set(float64(len(s.down)))
	listeners := slices.Clone(s.listeners)
	s.mu.Unlock()
	peersFoundDown.Inc()
	klog.InfoS("A node this one backs up failed its probes; taking it for down", "peer", node)
	for _, f := range listeners {
		f()
	}
}

// takeVerdict replaces the nodes taken for down with a newer verdict of a ccm.
func (s *Standby) takeVerdict() {
	v := s.responder.Verdict()
	down := map[string]bool{}
	for _, n := range v.Down {
		down[n] = true
	}
	s.mu.Lock()
	if !v.Newer(s.verdict) {
		s.mu.Unlock()
		return
	}
	s.verdict = v.VerdictRef
	same := maps.Equal(down, s.down)
	s.down = down
	downNodes.Set(float64(len(down)))
	listeners := slices.Clone(s.listeners)
	s.mu.Unlock()
	klog.V(2).InfoS("Took the ccm's verdict", "seq", v.Seq, "down", v.Down[:min(len(v.Down), 10)])
	if !same {
		for _, f := range listeners {
			f()
		}
	}
}
