// Package announcer is the ccm's announcer controller: it chooses the node that announces
// each Service address, with the rule of package pick, and publishes the choice as the
// announcer annotation of the Services holding the address. It is the annotation's only
// writer, and writes only when the choice changes.
//
// Its unit is the address group: the Services that hold an address, together with the
// other addresses they hold (a dual-stack Service has one announcer for both). Grouping by
// the addresses in the Services' status, rather than by their sharing keys, keeps one
// announcer per address whatever the Services ask for now: a Service that dropped its
// sharing key but could not get an address of its own yet still holds the shared one.
package announcer

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/controlloop"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Name is the controller's name, in main's controller list, its queue and its logs.
const Name = "baremetal-announcer"

// Event reasons of the announcer.
const (
	ReasonAnnouncerChanged = "AnnouncerChanged"
	ReasonNoAnnouncer      = "NoAnnouncer"
	// ReasonPartlyAnnounced warns that no node can announce some of a group's addresses
	// (a family, or a pool's), so its announcer announces the others alone.
	ReasonPartlyAnnounced = "PartlyAnnounced"
)

// byAddress indexes Services by the addresses in their status.
const byAddress = "lb.baremetal.io/ingress-address"

// byService indexes EndpointSlices by their Service, "namespace/name": deciding every
// group at once reads the slices of every Service.
const byService = "lb.baremetal.io/service"

// Health is what the announcer needs to know of the node agents: a *prober.Prober.
type Health interface {
	// Health returns the state of a node's agent.
	Health(node string) liveness.State
	// OnChange registers a function called with the node whose agent changed state.
	OnChange(func(node string))
	// HasSynced reports whether every agent there was at the start has a verdict.
	HasSynced() bool
	// Unable returns the pools and families a node's agent cannot announce now.
	Unable(node string) []probe.Unable
	// SetReplaced sets the nodes the announcer moved addresses away from while their
	// agents were down, each with the resourceVersion their agent's Service cache must
	// reach before they may announce again (prober.Held while the annotations still
	// name them).
	SetReplaced(nodes map[string]uint64)
}

// Controller is the announcer controller. Its queue holds address groups, named
// "address/<the group's lowest address>", and "service/<namespace>/<name>" for a Service
// without addresses whose annotation is to be removed.
type Controller struct {
	cfg      atomic.Pointer[config.Config]
	client   kubernetes.Interface
	recorder record.EventRecorder
	health   Health

	services       corelisters.ServiceLister
	serviceIndexer cache.Indexer
	sliceIndexer   cache.Indexer
	nodes          corelisters.NodeLister
	synced         []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]

	spread spread // the last decision of every group at once
	// returns are the nodes back from down lately, whose return to the standby lists
	// waits.
	returns returns

	mu      sync.Mutex
	decided map[string]decision // the last decision per group, to warn once and for the status page
	groupOf map[string]string   // the group of each Service of decided, by "namespace/name"
	// listeners are told of the Services whose announcement changed.
	listeners []func(services []string)
	owned     map[string]ownership // the last decision per group, for the gauges
	changes   changeLog            // the last announcer changes, for the status page
	// patched are the announcer patches whose result the cache may not hold yet.
	patched map[types.NamespacedName]patch
	// held are, per group, the nodes its annotations still name though it moved away from
	// them while their agents were down; heldBy counts the groups per node.
	held   map[string][]string
	heldBy map[string]int
	// replaced is what SetReplaced was last given.
	replaced map[string]uint64
	// serviceVersion is the Service informer's LastSyncResourceVersion.
	serviceVersion func() string
	// isolatedNodes are the Nodes the ProbesLost events of the isolation under way went
	// to, since isolatedSince; the ProbesRestored events go to the same ones.
	isolatedNodes []string
	isolatedSince time.Time
}

// New returns an announcer over the Services, EndpointSlices and Nodes of factory. It
// writes with client, which should have a rate limit of its own: after a node failure it
// patches every Service that node announced at once.
func New(cfg *config.Config, factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder, health Health) *Controller {
	registerMetrics()
	services := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	nodes := factory.Core().V1().Nodes()
	c := &Controller{
		client:         client,
		recorder:       recorder,
		health:         health,
		services:       services.Lister(),
		serviceIndexer: services.Informer().GetIndexer(),
		sliceIndexer:   slices.Informer().GetIndexer(),
		nodes:          nodes.Lister(),
		synced:         []cache.InformerSynced{services.Informer().HasSynced, slices.Informer().HasSynced, nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		decided: map[string]decision{},
		groupOf: map[string]string{},
		owned:   map[string]ownership{},
		returns: returns{hold: flapHold},
		patched: map[types.NamespacedName]patch{},
		held:    map[string][]string{},
		heldBy:  map[string]int{},

		replaced:       map[string]uint64{},
		serviceVersion: services.Informer().LastSyncResourceVersion,
	}
	c.cfg.Store(cfg)
	utilruntime.Must(services.Informer().AddIndexers(cache.Indexers{byAddress: func(obj any) ([]string, error) {
		svc, ok := obj.(*v1.Service)
		if !ok {
			return nil, nil
		}
		r, _ := annotation.Parse(svc)
		var out []string
		for _, a := range r.Ingress {
			out = append(out, a.String())
		}
		return out, nil
	}}))
	utilruntime.Must(slices.Informer().AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
	}}))
	_, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueService,
		UpdateFunc: func(old, cur any) {
			if conditionsOnly(old, cur) {
				return
			}
			c.enqueueService(old)
			c.enqueueService(cur)
		},
		DeleteFunc: func(obj any) {
			c.forgetPatch(obj)
			c.enqueueService(obj)
		},
	})
	utilruntime.Must(err)
	_, err = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueSlice,
		UpdateFunc: func(_, cur any) { c.enqueueSlice(cur) },
		DeleteFunc: c.enqueueSlice,
	})
	utilruntime.Must(err)
	_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.nodeAdded,
		UpdateFunc: c.nodeUpdated,
		DeleteFunc: func(any) { c.enqueueAll() },
	})
	utilruntime.Must(err)
	return c
}

// SetConfig replaces the cloud-config, for a file that changed: every group is decided
// again under the pools' new nodeSelectors.
func (c *Controller) SetConfig(cfg *config.Config) {
	c.cfg.Store(cfg)
	c.enqueueAll()
}

// conditionsOnly reports whether two versions of a Service differ in their status
// conditions alone: those are written from the announcer's decisions, and decide nothing,
// so writing them must not make the announcer decide again.
func conditionsOnly(old, cur any) bool {
	o, ok1 := old.(*v1.Service)
	n, ok2 := cur.(*v1.Service)
	if !ok1 || !ok2 || apiequality.Semantic.DeepEqual(o.Status.Conditions, n.Status.Conditions) {
		return false
	}
	a, b := *o, *n
	a.ResourceVersion, b.ResourceVersion = "", ""
	a.ManagedFields, b.ManagedFields = nil, nil
	a.Status.Conditions, b.Status.Conditions = nil, nil
	return apiequality.Semantic.DeepEqual(&a, &b)
}

// addressKey names the group of address a, until a lower address joins it.
func addressKey(a netip.Addr) string { return "address/" + a.String() }

// serviceKey names a Service without addresses, whose annotation may need removing.
func serviceKey(svc *v1.Service) string { return "service/" + svc.Namespace + "/" + svc.Name }

func (c *Controller) enqueueService(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	svc, ok := obj.(*v1.Service)
	if !ok {
		return
	}
	c.touch()
	r, _ := annotation.Parse(svc)
	for _, a := range r.Ingress {
		c.queue.Add(addressKey(a))
	}
	if len(r.Ingress) == 0 && r.Announcer != "" {
		c.queue.Add(serviceKey(svc))
	}
}

func (c *Controller) enqueueSlice(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := slice.Labels[discoveryv1.LabelServiceName]
	if svc, err := c.services.Services(slice.Namespace).Get(name); err == nil {
		c.enqueueService(svc)
	}
}

// enqueueNode queues the groups node announces ahead of the others, when its agent
// changed state: with thousands of Services, the ones that lost their announcer go first.
func (c *Controller) enqueueNode(node string) {
	c.mu.Lock()
	var first []string
	for key, o := range c.owned {
		if o.node == node {
			first = append(first, key)
		}
	}
	c.mu.Unlock()
	for _, key := range first {
		c.queue.Add(key)
	}
	c.enqueueAll()
}

func (c *Controller) enqueueAll() {
	services, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range services {
		c.enqueueService(svc)
	}
}

// Run decides with workers until ctx ends. It decides nothing before its caches have
// synced and every agent has a verdict: deciding before that would take every address
// away from the nodes not probed yet.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) {
		return
	}
	if !cache.WaitForNamedCacheSync(Name+"-agents", ctx.Done(), c.health.HasSynced) {
		return
	}
	c.health.OnChange(c.enqueueNode)
	if iso, ok := c.health.(IsolationSource); ok {
		iso.OnIsolation(c.isolationChanged)
	}
	c.enqueueAll()
	klog.InfoS("Announcer started", "workers", workers)
	controlloop.Start(ctx, c.queue, workers, c.sync, controlloop.Failure{Message: "Syncing announcer failed, will retry", Key: "group"})
	<-ctx.Done()
}

// HasSynced reports whether the announcer's caches have synced and every agent has a
// verdict, so that its decisions are made on a full view.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return c.health.HasSynced()
}

// forgetPatch drops what is known of this ccm's patches of a deleted Service.
func (c *Controller) forgetPatch(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if svc, ok := obj.(*v1.Service); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.patched, types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
	}
}
