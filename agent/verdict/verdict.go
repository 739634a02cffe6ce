// Package verdict is the agent's verdict: the nodes it takes for down, from the ccm's
// signed verdict and, while no ccm is heard, its own checks of the nodes it backs up.
//
// The ccm's verdict, taken by the probe responder, names the nodes taken for down; an
// agent announces the addresses of a Service whose plan (announcer, then standbys) it is
// the first live node of. When no ccm has been heard for a probe interval and a half, or
// ten times that for an agent the ccm probes at the idle rate (probe.SilentAfter; the
// leader died, perhaps with the node it ran on; an election is under way; the API server
// is away and no ccm leads), the agent probes the nodes ahead of it in the plans, with
// the same authenticated probes, and takes a node that fails them for down too, until a
// ccm's next verdict says otherwise. Only the nodes a standby backs up are probed, and
// only while no ccm is heard.
package verdict

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/peers"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Responder is what Keeper needs of the probe responder: a *responder.Responder.
type Responder interface {
	Verdict() probe.Verdict
	LastCCM() time.Time
	SilentAfter() time.Duration
	Unread() bool
	OnVerdict(func())
	SetCovers([]string)
	SetStandsDown(bool)
	CCMVerdict() probe.VerdictRef
	// CacheVersion returns the resourceVersion this agent's Service cache has reached:
	// peers whose caches are ahead cannot confirm where this node stands.
	CacheVersion() uint64
}

// Peers is what Keeper needs of its prober of peers: a *peers.Prober.
type Peers interface {
	Run(ctx context.Context)
	Health(node string) liveness.State
	OnChange(func(node string))
	SetTargets(map[string]bool)
	CoveredBy(node string) []string
	Agents() map[string]peers.Agent
}

// Keeper keeps the agent's verdict, the nodes it takes for down: the ccm's verdict and,
// while no ccm is heard, the peers its own probes found down. It is safe for concurrent
// use.
type Keeper struct {
	node      string
	interval  time.Duration
	responder Responder
	peers     Peers

	mu      sync.Mutex
	verdict probe.VerdictRef
	down    map[string]bool // the verdict's, and the peers found down since
	// coveredBy are the peers that said, while no ccm was heard, that they stand in for
	// this node: it withdraws the addresses of the plans that name one of them, and only
	// those, until a ccm's verdict.
	coveredBy map[string]bool
	peerSet   map[string]bool
	silent    bool
	listeners []func()
	// confirmed is false from the start, and from the time this node lost an
	// interface (Unconfirm), until it knows where it stands: it holds the verdict the
	// ccm is at, or, while no ccm is heard, it has probed every peer since and one at
	// least answered. Until then
	// it takes itself for down, so that an agent that restarts, or comes back from
	// being cut off, takes nothing back that others took over meanwhile.
	confirmed   bool
	unconfirmed time.Time
	// settle is how long after unconfirmed a ccm request must be taken to confirm: an
	// interval once the node lost an interface (Unconfirm), none at the start.
	settle time.Duration
	// peersKnown is set once the plans have been read (SetPeers).
	peersKnown bool
	// wake makes Run look at once, rather than at the time it planned.
	wake chan struct{}
}

var (
	ccmSilent = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "baremetal_agent",
		Name:           "ccm_silent",
		Help:           "1 while no ccm has been heard for a probe interval and a half (ten times that while the ccm probes this agent at the idle rate), and the agent checks the nodes it backs up itself; else 0.",
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

// New returns the Keeper of node over the verdicts responder takes, checking peers with
// peers, for probes every cfg.ProbeInterval.
func New(node string, cfg config.Failover, responder Responder, peers Peers) *Keeper {
	s := &Keeper{node: node, interval: cfg.ProbeInterval, responder: responder, peers: peers, down: map[string]bool{}, coveredBy: map[string]bool{}, peerSet: map[string]bool{}, unconfirmed: time.Now(),
		wake: make(chan struct{}, 1)}
	// Unconfirmed from the start: the replies say so, for a new leader to see.
	responder.SetStandsDown(true)
	responder.OnVerdict(s.takeVerdict)
	peers.OnChange(s.peerChanged)
	peers.SetTargets(map[string]bool{})
	return s
}

// Snapshot returns a copy of the nodes taken for down, this one among them while it is
// not confirmed: one view for a whole computation.
func (k *Keeper) Snapshot() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := maps.Clone(k.down)
	if !k.confirmed {
		out[k.node] = true
	}
	return out
}

// CoveredBy returns the peers that said, while no ccm was heard, that they stand in for
// this node, sorted: it announces nothing of a plan that names one of them.
func (k *Keeper) CoveredBy() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(maps.Keys(k.coveredBy))
}

// Unconfirm makes this node take itself for down until it knows where it stands again:
// call it when the node loses an interface, since it may have been cut off.
func (k *Keeper) Unconfirm() {
	k.mu.Lock()
	was := k.confirmed
	k.confirmed, k.unconfirmed, k.settle = false, time.Now(), k.interval
	k.mu.Unlock()
	if was {
		klog.InfoS("Lost an interface; announcing nothing until the ccm's verdict or the peers confirm where this node stands")
		k.changed()
		// Run checks every step again until the node is confirmed.
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// confirm checks whether this node knows where it stands now.
func (k *Keeper) confirm() {
	k.mu.Lock()
	if k.confirmed {
		k.mu.Unlock()
		return
	}
	since, settle, silent, held, peersKnown := k.unconfirmed, k.settle, k.silent, k.verdict, k.peersKnown
	targets := maps.Clone(k.peerSet)
	k.mu.Unlock()
	how := ""
	// A request taken within an interval of the loss may have been sent before it, queued
	// in the socket while the link went down: only a later one shows that the ccm hears
	// this node since. Else a node whose link went down could take itself for confirmed
	// and, once the link is back, announce what its standby took over meanwhile.
	if ccm := k.responder.CCMVerdict(); k.responder.LastCCM().After(since.Add(settle)) && ccm.Seq != 0 && ccm == held {
		how = "verdict"
	} else if silent {
		// Every peer answering since, none with a Service cache ahead of this node's: one
		// answer is not enough, as the peer that stands in for this node may answer a
		// moment after another that does not; and a peer that saw annotations this node
		// has not may hold what this node still takes for its own. The node waits for its
		// cache or a ccm then. A node that hears no one cannot tell its own isolation from
		// everyone's death, and waits for a ccm too. No peers at all (once the plans are
		// known): no one could have taken over.
		probed := k.peers.Agents()
		own := k.responder.CacheVersion()
		heard := true
		for n := range targets {
			p := probed[n]
			heard = heard && p.LastAnswer.After(since) && (own == 0 || p.CacheVersion <= own)
		}
		if peersKnown && heard {
			how = "peers"
		}
	}
	if how == "" {
		return
	}
	k.mu.Lock()
	k.confirmed = true
	k.mu.Unlock()
	klog.InfoS("Confirmed where this node stands", "by", how)
	k.changed()
}

// changed tells the responder and the listeners that the nodes taken for down changed.
func (k *Keeper) changed() {
	k.mu.Lock()
	// Withdrawn from some plans counts: a new leader then keeps what the coverers took.
	standsDown := k.down[k.node] || !k.confirmed || len(k.coveredBy) > 0
	downNodes.Set(float64(len(k.down)))
	listeners := slices.Clone(k.listeners)
	k.mu.Unlock()
	k.responder.SetStandsDown(standsDown)
	for _, f := range listeners {
		f()
	}
}

// OnChange registers f to be called whenever the nodes taken for down change.
func (k *Keeper) OnChange(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.listeners = append(k.listeners, f)
}

// SetPeers sets the other nodes of the plans this one is in: those it checks while no
// ccm is heard.
func (k *Keeper) SetPeers(nodes []string) {
	set := map[string]bool{}
	for _, n := range nodes {
		set[n] = true
	}
	k.mu.Lock()
	k.peerSet, k.peersKnown = set, true
	silent := k.silent
	k.mu.Unlock()
	if silent {
		k.peers.SetTargets(set)
	}
}

// SetCovers tells the ccm, in the following replies, which nodes this agent stands in for.
func (k *Keeper) SetCovers(nodes []string) { k.responder.SetCovers(nodes) }

// Run follows whether a ccm is heard until ctx ends, and checks the peers while none is.
//
// While a ccm is heard and this node is confirmed, nothing can change before the moment
// the ccm would have been silent for SilentAfter, so Run sleeps until then: an agent at
// rest wakes about once a probe, not four times a probe interval, which on a node whose
// pods keep every core busy leaves its small share of the CPU to its answers. Otherwise
// (not confirmed, no ccm heard, silence about to begin) it checks every quarter interval.
func (k *Keeper) Run(ctx context.Context) {
	step := k.interval / 4
	// A check later than this past its time came from a process short of CPU.
	late := probe.SilentAfter(k.interval)/2 - step
	timer := time.NewTimer(step)
	defer timer.Stop()
	due := time.Now().Add(step)
	stopPeers := func() {}
	defer func() { stopPeers() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-k.wake:
		}
		stalled := time.Since(due) > late
		k.confirm()
		last := k.responder.LastCCM()
		now := time.Now()
		silent := now.Sub(last) > k.responder.SilentAfter()
		due = k.nextCheck(now, last, silent, step)
		timer.Reset(due.Sub(now))
		// A process short of CPU (its node's cores all busy, its quota spent) hears the
		// ccm late, not never: the ccm's requests wait in its socket. Silence is not
		// taken from a check that came late, nor while datagrams wait unread, or this
		// agent would check its peers, at a cost it can least afford then, each time it
		// runs late.
		k.mu.Lock()
		if silent && !k.silent && (stalled || k.responder.Unread()) {
			k.mu.Unlock()
			continue
		}
		changed := silent != k.silent
		k.silent = silent
		peerSet := maps.Clone(k.peerSet)
		k.mu.Unlock()
		if !changed {
			continue
		}
		if silent {
			ccmSilent.Set(1)
			klog.InfoS("No ccm heard; checking the peers of this node's plans", "lastHeard", last, "peers", len(peerSet))
			peerCtx, cancel := context.WithCancel(ctx)
			stopPeers = cancel
			k.peers.SetTargets(peerSet)
			go k.peers.Run(peerCtx)
		} else {
			ccmSilent.Set(0)
			klog.InfoS("A ccm is heard again; no more checks of peers")
			// Targets first: once the peers' run is over, none is left to check.
			k.peers.SetTargets(map[string]bool{})
			stopPeers()
		}
	}
}

// nextCheck returns when Run looks again, given the last time a ccm was heard and
// whether it is silent now: at the moment the ccm would turn silent while this node is
// confirmed and hears it, else a step on.
func (k *Keeper) nextCheck(now, last time.Time, silent bool, step time.Duration) time.Time {
	k.mu.Lock()
	quiet := k.confirmed && !k.silent && !silent
	k.mu.Unlock()
	if !quiet {
		return now.Add(step)
	}
	// Just past the moment, so that the check finds the silence begun.
	return last.Add(k.responder.SilentAfter() + time.Millisecond)
}

// peerChanged takes a peer that failed this agent's probes for down, and notes the peers
// that answer that they stand in for this node, while no ccm is heard. A peer that comes
// back stays down, and a coverer stays one, until a ccm's verdict: only a ccm moves
// addresses back, after it learnt from the agents what they did.
func (k *Keeper) peerChanged(peer string) {
	var mark []string
	// A starting peer announces nothing yet either.
	if h := k.peers.Health(peer); h == liveness.Down || h == liveness.Starting {
		mark = append(mark, peer)
	}
	by := k.peers.CoveredBy(k.node)
	k.mu.Lock()
	mark = slices.DeleteFunc(mark, func(n string) bool { return k.down[n] })
	by = slices.DeleteFunc(by, func(n string) bool { return k.coveredBy[n] })
	if !k.silent || len(mark)+len(by) == 0 {
		k.mu.Unlock()
		return
	}
	for _, n := range mark {
		k.down[n] = true
	}
	for _, n := range by {
		k.coveredBy[n] = true
	}
	k.mu.Unlock()
	for _, n := range mark {
		peersFoundDown.Inc()
		klog.InfoS("A peer failed this node's probes; taking it for down", "peer", n)
	}
	if len(by) > 0 {
		klog.InfoS("Peers stand in for this node; withdrawing the addresses of the plans that name them until a ccm's verdict", "coveredBy", by)
	}
	k.changed()
}

// takeVerdict replaces the nodes taken for down with the verdict the responder took: a
// later one of the ccm it follows, or the first of a ccm it follows now.
func (k *Keeper) takeVerdict() {
	v := k.responder.Verdict()
	down := map[string]bool{}
	for _, n := range v.Down {
		down[n] = true
	}
	k.mu.Lock()
	if !v.Replaces(k.verdict) {
		k.mu.Unlock()
		return
	}
	k.verdict = v.VerdictRef
	same := maps.Equal(down, k.down) && len(k.coveredBy) == 0
	k.down, k.coveredBy = down, map[string]bool{}
	k.mu.Unlock()
	klog.V(2).InfoS("Took the ccm's verdict", "seq", v.Seq, "down", v.Down[:min(len(v.Down), 10)])
	k.confirm()
	if !same {
		k.changed()
	}
}
