// Package servicewatch follows the Services that name this node as their announcer and
// hands the addresses it should announce to the speaker.
package servicewatch

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
)

// ReasonNoInterface is the reason of the Warning event on a Service whose address this
// node should announce but has no interface for.
const ReasonNoInterface = "NoInterface"

// The indexes of the Service cache: by the node the announcer annotation names, and by
// every node of the plan (announcer and standbys).
const (
	byAnnouncer = "announcer"
	byPlan      = "plan"
)

// The queue holds one key: every change leads to the same recomputation, and bursts of
// changes collapse into one.
const everything = "desired"

// Applier takes the addresses the node announces: a speaker.Speaker.
type Applier interface {
	Apply([]desired.Address)
}

// Backer takes the addresses this node would take over first (desired.BackedOf), at
// every change: a *wirecheck.Check's adapter, which checks them on the wire.
type Backer interface {
	Back([]desired.Backed)
}

// Verdict is what the watcher needs to know of the agent's verdict, the nodes taken for
// down, and tells back:
// a *verdict.Keeper.
type Verdict interface {
	// Snapshot returns the nodes taken for down.
	Snapshot() map[string]bool
	// CoveredBy returns the peers that said they stand in for this node while no ccm
	// was heard.
	CoveredBy() []string
	// OnChange registers a function called when they change.
	OnChange(func())
	// SetPeers sets the other nodes of the plans this one is in.
	SetPeers([]string)
	// SetCovers sets the nodes this one stands in for.
	SetCovers([]string)
}

var refusedAddresses = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Subsystem:      "baremetal_agent",
	Name:           "refused_addresses",
	Help:           "Addresses or Services that name this node as announcer but are not announced, by reason: NotInPool (outside every pool of the cloud-config), NodeNotSelected (the pool's nodeSelector does not select this node), NotAnAddress (an ingress entry that is no IP), NotLoadBalancer or OtherClass (a Service not of type LoadBalancer, or with a loadBalancerClass).",
	StabilityLevel: metrics.ALPHA,
}, []string{"reason"})

// Metrics returns the collectors of this package, to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{refusedAddresses, confirmedOnlyGauge, vacantTakeovers}
}

// Watcher computes what this node announces from the Services naming it.
type Watcher struct {
	node     string
	cfg      atomic.Pointer[config.Config]
	speaker  Applier
	verdict  Verdict
	recorder record.EventRecorder

	informer   cache.SharedIndexInformer
	health     *watchHealth
	lister     listersv1.ServiceLister
	nodes      listersv1.NodeLister
	nodeSynced cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]

	refused []desired.Refusal
	// draining, once set, keeps every address announced that was: the node is going away,
	// and the new announcer may see its annotation some milliseconds after this node does.
	draining atomic.Bool
	applied  []desired.Address // what the speaker was last given; only sync touches it
	// linger keeps answering for the addresses that leave this node while its Node is
	// drained.
	linger lingerSet
	covers []string // the nodes stood in for, last sync; only sync touches it
	// parsed keeps the requests of the Services naming the node, and everyParsed those
	// of every Service cached, which only an agent announcing what the ccm confirms needs;
	// only sync touches them.
	parsed, everyParsed annotation.Cache
	// duties, if set, is the ccm's duty to compare the own view with.
	duties Duties
	check  dutyCheck
	// dutyWake makes watchDuty look at once (pokeDuty).
	dutyWake chan struct{}
	// backer, if set, is given what this node backs (SetBacker).
	backer Backer
}

// SetBacker makes b take, at every change, the addresses this node would take over
// first. Call it before Run.
func (w *Watcher) SetBacker(b Backer) { w.backer = b }

// Cache is the agent's cache of the Services of type LoadBalancer, and the health of its
// watch: the watcher reads it, and the probe responder reports how far it has come
// (Version). NewCache makes it.
type Cache struct {
	informer cache.SharedIndexInformer
	lister   listersv1.ServiceLister
	health   *watchHealth
}

// NewCache registers the Service cache with factory. Call it before anything else asks
// factory for Services: the factory's Services informer must be this one.
func NewCache(factory informers.SharedInformerFactory) *Cache {
	health := &watchHealth{now: time.Now}
	factory.InformerFor(&v1.Service{}, health.newInformer)
	services := factory.Core().V1().Services()
	return &Cache{informer: services.Informer(), lister: services.Lister(), health: health}
}

// Version returns the resourceVersion the cache has reached, as a number, 0 when it has
// none that is one. The ccm lets this node announce again what it moved away from it
// only once the cache has seen the annotations that say so.
func (c *Cache) Version() uint64 {
	v, _ := strconv.ParseUint(c.informer.LastSyncResourceVersion(), 10, 64)
	return v
}

// New returns a Watcher of the Services in services for node, whose Node object nodes
// follows: its labels decide which pools' addresses it may announce. duties, if not nil,
// is the ccm's duty the probe responder receives: the watcher compares its own view with
// it, and announces only what the duty confirms when it cannot trust its own view; while
// no ccm is heard (duties.SilentAfter) there is no duty to compare with. Start the
// factories, then Run.
func New(node string, cfg *config.Config, services *Cache, nodes coreinformers.NodeInformer, speaker Applier, verdict Verdict, duties Duties, recorder record.EventRecorder) (*Watcher, error) {
	w := &Watcher{
		health:     services.health,
		node:       node,
		speaker:    speaker,
		verdict:    verdict,
		recorder:   recorder,
		informer:   services.informer,
		lister:     services.lister,
		nodes:      nodes.Lister(),
		nodeSynced: nodes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "baremetal-agent-services"}),
		dutyWake: make(chan struct{}, 1),
		linger:   lingerSet{node: node, bound: DrainLinger},
	}
	w.health.changed = w.pokeDuty
	if duties != nil {
		w.duties = duties
		duties.OnDuty(func() { w.queue.Add(everything) })
		duties.OnExpected(w.pokeDuty)
	}
	w.cfg.Store(cfg)
	if err := w.informer.AddIndexers(cache.Indexers{
		byAnnouncer: func(obj any) ([]string, error) {
			if r := requestOf(obj); r != nil && r.Announcer != "" {
				return []string{r.Announcer}, nil
			}
			return nil, nil
		},
		byPlan: func(obj any) ([]string, error) {
			if r := requestOf(obj); r != nil {
				return r.Plan(), nil
			}
			return nil, nil
		},
	}); err != nil {
		return nil, err
	}
	mine := func(obj any) bool { r := requestOf(obj); return r != nil && slices.Contains(r.Plan(), node) }
	verdict.OnChange(func() { w.queue.Add(everything) })
	_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if mine(obj) {
				w.queue.Add(everything)
			}
		},
		UpdateFunc: func(old, cur any) {
			if mine(old) || mine(cur) {
				w.queue.Add(everything)
			}
		},
		DeleteFunc: func(obj any) {
			if mine(obj) {
				w.queue.Add(everything)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	// The pools' nodeSelectors are checked against the node's labels: a change of labels
	// can add or withdraw addresses. The informer holds every node, for the checks of
	// peers; only this one's matter here.
	own := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, ok := obj.(*v1.Node)
		return ok && n.Name == node
	}
	_, err = nodes.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: own,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.queue.Add(everything) },
			UpdateFunc: func(any, any) { w.queue.Add(everything) },
			DeleteFunc: func(any) { w.queue.Add(everything) },
		},
	})
	return w, err
}

// requestOf returns a Service's request as annotation.Parse reads it, or nil.
func requestOf(obj any) *annotation.Request {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	svc, ok := obj.(*v1.Service)
	if !ok {
		return nil
	}
	r, _ := annotation.Parse(svc)
	return r
}

// SetConfig replaces the cloud-config, for a file that changed: an address of a pool that
// is gone is withdrawn at once.
func (w *Watcher) SetConfig(cfg *config.Config) {
	w.cfg.Store(cfg)
	w.queue.Add(everything)
}

// HasSynced reports whether the Service and Node caches have synced: before that,
// nothing is announced or withdrawn.
func (w *Watcher) HasSynced() bool { return w.informer.HasSynced() && w.nodeSynced() }

// Named returns how many Services name this node as their announcer.
func (w *Watcher) Named() int {
	objs, _ := w.informer.GetIndexer().ByIndex(byAnnouncer, w.node)
	return len(objs)
}

// Run waits for the cache to sync and then keeps the speaker's addresses up to date
// until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer w.queue.ShutDown()
	if !cache.WaitForNamedCacheSync("baremetal-agent", ctx.Done(), w.HasSynced) {
		return
	}
	// The first sync runs even if nothing names this node yet, so that the state is
	// known and logged from the start.
	w.queue.Add(everything)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for w.processNext() {
		}
	}, time.Second)
	go w.watchDuty(ctx)
	<-ctx.Done()
}

func (w *Watcher) processNext() bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(); err != nil {
		utilruntime.HandleError(err)
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// cached returns every Service of the cache.
func (w *Watcher) cached() []*v1.Service {
	objs := w.informer.GetStore().List()
	services := make([]*v1.Service, 0, len(objs))
	for _, o := range objs {
		if svc, ok := o.(*v1.Service); ok {
			services = append(services, svc)
		}
	}
	return services
}

func (w *Watcher) sync() error {
	objs, err := w.informer.GetIndexer().ByIndex(byPlan, w.node)
	if err != nil {
		return fmt.Errorf("list the Services naming %s: %w", w.node, err)
	}
	services := make([]*v1.Service, len(objs))
	for i, o := range objs {
		services[i] = o.(*v1.Service)
	}
	requests := w.parsed.Requests(services)
	cfg := w.cfg.Load()
	var nodeLabels labels.Set
	drained := false
	if n, err := w.nodes.Get(w.node); err == nil {
		nodeLabels = n.Labels
		// A value that cannot be read drains nothing; the ccm warns of it on the Node.
		m, _ := annotation.ReadNode(n, cfg.Maintenance.DrainOnCordon)
		drained = m.Drained != ""
	}
	down, coveredBy := w.verdict.Snapshot(), w.verdict.CoveredBy()
	isDown := func(n string) bool { return down[n] }
	addrs, refused := desired.ComputeOf(w.node, nodeLabels, requests, cfg, isDown, coveredBy)
	if w.draining.Load() {
		addrs = keep(w.applied, addrs)
	} else {
		addrs = w.confirm(addrs, func() ([]desired.Address, func(netip.Addr) bool) {
			// Every cached Service: a stale plan may name this node nowhere.
			every := w.everyParsed.Requests(w.cached())
			return desired.Held(w.node, nodeLabels, every, cfg), desired.Vacant(w.node, every, isDown)
		})
		var next time.Time
		if addrs, next = w.linger.apply(w.applied, addrs, drained, time.Now()); !next.IsZero() {
			w.queue.AddAfter(everything, time.Until(next))
		}
	}
	w.speaker.Apply(addrs)
	w.applied = addrs
	if w.backer != nil {
		w.backer.Back(desired.BackedOf(w.node, nodeLabels, requests, cfg, isDown))
	}
	var covers []string
	for _, a := range addrs {
		covers = append(covers, a.Covers...)
	}
	slices.Sort(covers)
	covers = slices.Compact(covers)
	if !slices.Equal(covers, w.covers) {
		klog.InfoS("Standing in for other nodes", "node", w.node, "covers", covers, "before", w.covers)
		w.covers = covers
	}
	w.verdict.SetCovers(covers)
	w.verdict.SetPeers(desired.PeersOf(w.node, requests))

	if !slices.Equal(refused, w.refused) {
		counts := map[desired.Reason]int{}
		for _, r := range refused {
			counts[r.Reason]++
			if !slices.Contains(w.refused, r) {
				klog.InfoS("Refusing to announce", "node", w.node, "service", r.Service, "address", r.Address, "reason", r.Reason, "detail", r.String())
			}
		}
		for _, reason := range desired.Reasons {
			refusedAddresses.WithLabelValues(string(reason)).Set(float64(counts[reason]))
		}
		w.refused = refused
	}
	klog.V(4).InfoS("Synced the addresses to announce", "node", w.node, "addresses", len(addrs), "refused", len(refused))
	return nil
}

// Unplaced records a Warning event on the Services of an address this node should
// announce but has no interface for. It is meant as speaker.Options.Unplaced.
func (w *Watcher) Unplaced(a desired.Address) {
	where := "no up interface has a subnet containing it"
	if len(a.Pool.Interfaces) > 0 {
		where = fmt.Sprintf("none of the interfaces of pool %s (%v) is up", a.Pool.Name, a.Pool.Interfaces)
	}
	w.eventOn(a.Services, v1.EventTypeWarning, ReasonNoInterface, "Node %s does not announce %s: %s", w.node, a.Addr, where)
}
