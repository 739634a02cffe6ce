// Package duty keeps, in the ccm, what every node's agent should announce: the addresses
// the published plans (announcer, then standbys) and the ccm's verdict give it, by the
// very rule the agents apply (desired.Assignments). The prober stamps the digest of a
// node's duty on every request to its agent, and sends the list to an agent whose own
// view differs. An agent whose Service cache froze (its watch broken, the API server out
// of its reach) then learns within a probe interval that it holds an address the ccm gave
// to another node, and stops answering for it.
//
// The duty is computed from the ccm's own Service cache and verdict, not from the
// announcer's decisions: the annotations and the verdict are what the agents read too,
// so the two views agree whenever the agent's cache is where the ccm's is.
package duty

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Prober is what the tracker needs of the prober: a *prober.Prober.
type Prober interface {
	// Verdict returns the verdict sent to the agents; Seq 0 before the first.
	Verdict() probe.Verdict
	// Expedite has the agents of nodes probed now, not in their next slot: their duty
	// changed, and a request carries its digest.
	Expedite(nodes []string)
}

// minRecompute spaces two computations: during a failover of thousands of Services the
// cache changes with every patch, and one computation every 50 ms keeps the cost bounded
// while staying far inside the time an agent waits before it doubts its own view.
const minRecompute = 50 * time.Millisecond

// Tracker computes every node's duty from the Service cache and the verdict. It is safe
// for concurrent use.
type Tracker struct {
	cfg      atomic.Pointer[config.Config]
	prober   Prober
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	dirty    chan struct{}

	parsed annotation.Cache // only Run touches it

	mu    sync.Mutex
	known bool
	// at is the verdict the duties were computed with.
	at     probe.VerdictRef
	byNode map[string][]netip.Addr
	digest map[string]probe.Digest

	// planned are the nodes some plan names; read without the lock by the prober's
	// scheduler, which looks at it on every round.
	planned atomic.Pointer[prober.Planned]
}

// New returns a Tracker over the Services and Nodes of the informers and the verdict of
// prober. It computes nothing before Run.
func New(cfg *config.Config, services coreinformers.ServiceInformer, nodes coreinformers.NodeInformer, prober Prober) *Tracker {
	t := &Tracker{
		prober:   prober,
		services: services.Lister(),
		nodes:    nodes.Lister(),
		synced:   []cache.InformerSynced{services.Informer().HasSynced, nodes.Informer().HasSynced},
		dirty:    make(chan struct{}, 1),
	}
	t.cfg.Store(cfg)
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { t.invalidate() },
		UpdateFunc: func(any, any) { t.invalidate() },
		DeleteFunc: func(any) { t.invalidate() },
	}
	if _, err := services.Informer().AddEventHandler(changed); err != nil {
		panic(err)
	}
	// Only labels matter, for the pools' nodeSelectors; kubelets update their Node often.
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { t.invalidate() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Node)
			n, ok2 := cur.(*v1.Node)
			if !ok1 || !ok2 || !labels.Equals(o.Labels, n.Labels) {
				t.invalidate()
			}
		},
		DeleteFunc: func(any) { t.invalidate() },
	})
	if err != nil {
		panic(err)
	}
	return t
}

// SetConfig replaces the cloud-config: the pools bound what an agent announces.
func (t *Tracker) SetConfig(cfg *config.Config) {
	t.cfg.Store(cfg)
	t.invalidate()
}

func (t *Tracker) invalidate() {
	select {
	case t.dirty <- struct{}{}:
	default:
	}
}

// Duty returns the digest of node's duty, and false while it is not known: before the
// caches synced and the first verdict.
func (t *Tracker) Duty(node string) (probe.Digest, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.digest[node], t.known
}

// List returns node's duty, sorted, and its digest; nil and false while it is not known.
func (t *Tracker) List(node string) ([]netip.Addr, probe.Digest, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byNode[node], t.digest[node], t.known
}

// Planned returns the nodes some plan names now; nil before the caches synced.
func (t *Tracker) Planned() *prober.Planned { return t.planned.Load() }

// Run computes the duties whenever the Services, the Nodes' labels, the cloud-config or
// the verdict change, until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	if !cache.WaitForNamedCacheSync("baremetal-duty", ctx.Done(), t.synced...) {
		return
	}
	// The verdict is polled: it changes in the prober's lock, which must not call out.
	tick := time.NewTicker(minRecompute / 5)
	defer tick.Stop()
	var last time.Time
	pending := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.dirty:
			pending = true
		case <-tick.C:
		}
		// A new verdict moves addresses at once on the agents: follow it at once. Service
		// changes are gathered.
		v := t.prober.Verdict()
		if v.VerdictRef == t.atVerdict() && (!pending || time.Since(last) < minRecompute) {
			continue
		}
		t.compute(v)
		last, pending = time.Now(), false
	}
}

func (t *Tracker) atVerdict() probe.VerdictRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at
}

// compute makes every node's duty anew under verdict v.
func (t *Tracker) compute(v probe.Verdict) {
	services, err := t.services.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list Services to compute the agents' duties")
		return
	}
	down := make(map[string]bool, len(v.Down))
	for _, n := range v.Down {
		down[n] = true
	}
	requests := t.parsed.Requests(services)
	byNode := desired.Assignments(requests, t.cfg.Load(), t.labelsOf, func(n string) bool { return down[n] })
	t.setPlanned(requests)
	digest := make(map[string]probe.Digest, len(byNode))
	for node, addrs := range byNode {
		digest[node] = probe.DigestOf(addrs)
	}
	t.mu.Lock()
	changed := changedDuties(t.digest, digest, t.known)
	t.byNode, t.digest, t.at = byNode, digest, v.VerdictRef
	t.known = v.Seq != 0
	t.mu.Unlock()
	// An agent whose duty changed hears it with the next request: at once, not in up to
	// an interval (ten for an idle one). A new announcer whose own view cannot be trusted
	// (its Service watch broken) waits for it before it announces.
	if len(changed) > 0 {
		t.prober.Expedite(changed)
	}
}

// changedDuties returns the nodes whose duty digest differs between before and after,
// sorted; none while before was not known, when every agent learns its duty in its slot.
func changedDuties(before, after map[string]probe.Digest, known bool) []string {
	if !known {
		return nil
	}
	var out []string
	for node, d := range after {
		if b, ok := before[node]; !ok || b != d {
			out = append(out, node)
		}
	}
	for node := range before {
		if _, ok := after[node]; !ok {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// setPlanned publishes the nodes the requests' plans name, as a new version if they changed.
func (t *Tracker) setPlanned(requests []*annotation.Request) {
	nodes := map[string]bool{}
	for _, r := range requests {
		if r.Announced() {
			for _, n := range r.Plan() {
				nodes[n] = true
			}
		}
	}
	old := t.planned.Load()
	if old != nil && maps.Equal(old.Nodes, nodes) {
		return
	}
	var version uint64 = 1
	if old != nil {
		version = old.Version + 1
	}
	t.planned.Store(&prober.Planned{Nodes: nodes, Version: version})
}

func (t *Tracker) labelsOf(node string) labels.Set {
	if n, err := t.nodes.Get(node); err == nil {
		return n.Labels
	}
	return nil
}
