package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/owner"
)

// Event reasons of the announcer controller.
const (
	ReasonAnnouncerChanged = "AnnouncerChanged"
	ReasonNoAnnouncer      = "NoAnnouncer"
)

// sharingKeyIndex indexes Services by their sharing key.
const sharingKeyIndex = "lb.baremetal.io/sharing-key"

// announcerController chooses the node announcing each address and publishes it as the
// announcer annotation of the Services holding the address. It is the annotation's only
// writer, and writes only when the choice changes. Its queue holds address groups: a
// sharing key ("shared/<key>") or a lone Service ("service/<namespace>/<name>").
type announcerController struct {
	cfg      *config.Config
	client   kubernetes.Interface
	recorder record.EventRecorder
	health   HealthSource
	prober   *prober

	services       corelisters.ServiceLister
	serviceIndexer cache.Indexer
	slices         discoverylisters.EndpointSliceLister
	nodes          corelisters.NodeLister
	synced         []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	lastWhy map[string]decision  // the last decision per group, to warn once and for the status page
	owned   map[string]ownership // the last decision per group, for the gauges
	changes changeLog            // the last announcer changes, for the status page
}

// decision is a group's last decision and the sentence that explains it.
type decision struct {
	node   string
	reason owner.Reason
	// why is owner.Explain's sentence: why the group moved to node, as in the event, or
	// why node has it when this ccm found it there.
	why string
	// since is when this ccm first made this decision (node and reason).
	since time.Time
}

// maxChanges is how many announcer changes the status page lists: enough to see what a
// failover moved, little enough to keep in memory.
const maxChanges = 50

// changeLog keeps the last maxChanges announcer changes in a ring. announcerController.mu
// guards it.
type changeLog struct {
	ring [maxChanges]AnnouncerChange
	n    int // changes ever added
}

func (l *changeLog) add(c AnnouncerChange) {
	l.ring[l.n%maxChanges] = c
	l.n++
}

// newestFirst returns the changes kept, the newest first.
func (l *changeLog) newestFirst() []AnnouncerChange {
	out := make([]AnnouncerChange, 0, min(l.n, maxChanges))
	for i := l.n - 1; i >= 0 && i >= l.n-maxChanges; i-- {
		out = append(out, l.ring[i%maxChanges])
	}
	return out
}

// ownership is a group's announcer ("" for none) and how many Services it holds.
type ownership struct {
	node     string
	services int
}

func newAnnouncerController(cfg *config.Config, factory informers.SharedInformerFactory) *announcerController {
	services := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	nodes := factory.Core().V1().Nodes()
	c := &announcerController{
		cfg:            cfg,
		services:       services.Lister(),
		serviceIndexer: services.Informer().GetIndexer(),
		slices:         slices.Lister(),
		nodes:          nodes.Lister(),
		synced:         []cache.InformerSynced{services.Informer().HasSynced, slices.Informer().HasSynced, nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "baremetal-announcer"}),
		lastWhy: map[string]decision{},
		owned:   map[string]ownership{},
	}
	c.prober = newProber(cfg.Failover, nodes)
	c.health = c.prober
	utilruntime.Must(services.Informer().AddIndexers(cache.Indexers{sharingKeyIndex: func(obj any) ([]string, error) {
		svc, ok := obj.(*v1.Service)
		if !ok {
			return nil, nil
		}
		if k := sharingKey(svc); k != "" {
			return []string{k}, nil
		}
		return nil, nil
	}}))
	_, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueService,
		UpdateFunc: func(old, cur any) {
			c.enqueueService(old)
			c.enqueueService(cur)
		},
		DeleteFunc: c.enqueueService,
	})
	utilruntime.Must(err)
	_, err = slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueSlice,
		UpdateFunc: func(_, cur any) { c.enqueueSlice(cur) },
		DeleteFunc: c.enqueueSlice,
	})
	utilruntime.Must(err)
	_, err = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			if nodeChanged(old, cur) {
				c.enqueueAll()
			}
		},
		DeleteFunc: func(any) { c.enqueueAll() },
	})
	utilruntime.Must(err)
	return c
}

// nodeChanged reports whether a node update can change a decision: kubelets update their
// Node often, and most updates do not.
func nodeChanged(old, cur any) bool {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !labels.Equals(o.Labels, n.Labels) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

func sharingKey(svc *v1.Service) string {
	return strings.TrimSpace(svc.Annotations[annotation.AllowSharedIP])
}

// groupKey names the address group of a Service.
func groupKey(svc *v1.Service) string {
	if k := sharingKey(svc); k != "" {
		return "shared/" + k
	}
	return "service/" + svc.Namespace + "/" + svc.Name
}

func (c *announcerController) enqueueService(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if svc, ok := obj.(*v1.Service); ok {
		c.queue.Add(groupKey(svc))
	}
}

func (c *announcerController) enqueueSlice(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := slice.Labels[discoveryv1.LabelServiceName]
	if svc, err := c.services.Services(slice.Namespace).Get(name); err == nil {
		c.queue.Add(groupKey(svc))
	}
}

// enqueueNode queues the groups node announces ahead of the others, when its agent
// changed state: with thousands of Services, the ones that lost their announcer go first.
func (c *announcerController) enqueueNode(node string) {
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

func (c *announcerController) enqueueAll() {
	services, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range services {
		if len(svc.Status.LoadBalancer.Ingress) > 0 || svc.Annotations[annotation.Announcer] != "" {
			c.queue.Add(groupKey(svc))
		}
	}
}

// Run processes the queue with workers until ctx ends.
func (c *announcerController) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSync("baremetal-announcer", ctx.Done(), c.synced...) {
		return
	}
	go c.prober.Run(ctx)
	// A new leader first learns which agents answer: deciding before that would take every
	// address away from nodes it has not probed yet.
	if !cache.WaitForNamedCacheSync("baremetal-agent-prober", ctx.Done(), c.health.HasSynced) {
		return
	}
	c.health.OnChange(c.enqueueNode)
	for range workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *announcerController) worker(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		if err := c.sync(ctx, key); err != nil {
			klog.ErrorS(err, "Syncing announcer failed, will retry", "group", key)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// members returns the Services of a group.
func (c *announcerController) members(key string) ([]*v1.Service, error) {
	if k, ok := strings.CutPrefix(key, "shared/"); ok {
		objs, err := c.serviceIndexer.ByIndex(sharingKeyIndex, k)
		if err != nil {
			return nil, err
		}
		var out []*v1.Service
		for _, o := range objs {
			out = append(out, o.(*v1.Service))
		}
		return out, nil
	}
	ns, name, _ := strings.Cut(strings.TrimPrefix(key, "service/"), "/")
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return []*v1.Service{svc}, err
}

// announced reports whether a Service's addresses are ours to announce.
func announced(svc *v1.Service) bool {
	return svc.DeletionTimestamp == nil && svc.Spec.Type == v1.ServiceTypeLoadBalancer &&
		svc.Spec.LoadBalancerClass == nil && len(ingressAddresses(svc)) > 0
}

// sync applies the rule to one group and publishes the result. It is idempotent: with
// nothing changed, it writes nothing.
func (c *announcerController) sync(ctx context.Context, key string) error {
	members, err := c.members(key)
	if err != nil {
		return err
	}
	slices.SortFunc(members, func(a, b *v1.Service) int { return strings.Compare(serviceKey(a), serviceKey(b)) })
	var active []*v1.Service
	for _, svc := range members {
		if announced(svc) {
			active = append(active, svc)
		} else if svc.Annotations[annotation.Announcer] != "" {
			// No address to announce any more: the annotation would mislead the agents.
			if err := c.setAnnouncer(ctx, svc, ""); err != nil {
				return err
			}
		}
	}
	if len(active) == 0 {
		c.forget(key)
		return nil
	}
	group, err := c.group(active)
	if err != nil {
		return err
	}
	nodes, err := c.nodeStates()
	if err != nil {
		return err
	}
	d := owner.Select(group, nodes)
	warn := c.remember(key, active, group, nodes, d)
	c.account(key, ownership{node: d.Node, services: len(active)})
	for _, svc := range active {
		prev := svc.Annotations[annotation.Announcer]
		if prev == d.Node {
			if d.Node == "" && warn {
				why := owner.Explain(prev, group, nodes, d)
				c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonNoAnnouncer, "No node announces %s: %s", group.FirstIP, why)
				c.logChange(svc, ReasonNoAnnouncer, prev, d, why)
			}
			continue
		}
		why := owner.Explain(prev, group, nodes, d)
		if err := c.setAnnouncer(ctx, svc, d.Node); err != nil {
			return err
		}
		announcerChanges.WithLabelValues(string(d.Reason)).Inc()
		if d.Node == "" {
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonNoAnnouncer, "No node announces %s: %s", group.FirstIP, why)
			c.logChange(svc, ReasonNoAnnouncer, prev, d, why)
		} else {
			c.recorder.Eventf(svc, v1.EventTypeNormal, ReasonAnnouncerChanged, "Announcer of %s changed from %q to %q: %s", group.FirstIP, prev, d.Node, why)
			c.logChange(svc, ReasonAnnouncerChanged, prev, d, why)
		}
		klog.V(2).InfoS("Announcer changed", "service", klog.KObj(svc), "from", prev, "to", d.Node, "reason", why)
	}
	return nil
}

// remember records the group's decision with the sentence that explains it, and reports
// whether a NoAnnouncer warning is due: on the first decision of the group, and whenever
// the reason changes.
func (c *announcerController) remember(key string, active []*v1.Service, g owner.Group, nodes []owner.Node, d owner.Decision) bool {
	c.mu.Lock()
	last, seen := c.lastWhy[key]
	c.mu.Unlock()
	same := seen && last.node == d.Node && last.reason == d.Reason
	// A kept announcer keeps the sentence of the change that brought it there, as its
	// event said it. With no announcer the sentence lists what keeps each node out, which
	// changes under the same reason, so it is written anew.
	if same && d.Node != "" {
		return false
	}
	now := decision{node: d.Node, reason: d.Reason, since: last.since}
	if !same {
		now.since = time.Now()
	}
	// The node the group moves from: the last decision, or, on this ccm's first decision,
	// the annotation another ccm (or this one before a restart) wrote.
	prev := last.node
	if !seen {
		for _, svc := range active {
			if prev = svc.Annotations[annotation.Announcer]; prev != "" {
				break
			}
		}
	}
	if prev == d.Node {
		prev = "" // nothing moved: explain the choice itself
	}
	now.why = owner.Explain(prev, g, nodes, d)
	c.mu.Lock()
	c.lastWhy[key] = now
	c.mu.Unlock()
	return !seen || last.reason != d.Reason
}

// logChange keeps an announcer change, or a NoAnnouncer warning, for the status page.
func (c *announcerController) logChange(svc *v1.Service, event, from string, d owner.Decision, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes.add(AnnouncerChange{
		Time: time.Now(), Service: serviceKey(svc), Event: event,
		From: from, To: d.Node, Reason: string(d.Reason), Why: why,
	})
}

func (c *announcerController) forget(key string) {
	c.account(key, ownership{})
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.lastWhy, key)
}

// account moves a group's Services in the gauges from its last decision to now.
func (c *announcerController) account(key string, now ownership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.owned[key]
	if was == now {
		return
	}
	for _, o := range []struct {
		ownership
		sign float64
	}{{was, -1}, {now, 1}} {
		if o.services == 0 {
			continue
		}
		if o.node == "" {
			servicesWithoutAnnouncer.Add(o.sign * float64(o.services))
		} else {
			servicesPerAnnouncer.WithLabelValues(o.node).Add(o.sign * float64(o.services))
		}
	}
	if now.services == 0 {
		delete(c.owned, key)
	} else {
		c.owned[key] = now
	}
}

// group gathers the rule's view of the Services sharing an address.
func (c *announcerController) group(members []*v1.Service) (owner.Group, error) {
	g := owner.Group{Endpoints: map[string]int{}}
	var first netip.Addr
	for _, svc := range members {
		for _, a := range ingressAddresses(svc) {
			if !first.IsValid() || a.Less(first) {
				first = a
			}
		}
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
			g.Local = true
		}
		if p := svc.Annotations[annotation.PreferredNodes]; p != "" && g.PreferredNodes == nil {
			for _, n := range strings.Split(p, ",") {
				if n = strings.TrimSpace(n); n != "" {
					g.PreferredNodes = append(g.PreferredNodes, n)
				}
			}
		}
		slices, err := c.slices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
		if err != nil {
			return g, err
		}
		for _, s := range slices {
			for _, ep := range s.Endpoints {
				// A nil Ready means unknown, which consumers are to take as ready.
				ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
				if ep.NodeName != nil && ready && !terminating {
					g.Endpoints[*ep.NodeName]++
				}
			}
		}
	}
	g.FirstIP = first.String()
	if !c.cfg.Failover.Failback {
		for _, svc := range members {
			if g.Current = svc.Annotations[annotation.Announcer]; g.Current != "" {
				break
			}
		}
	}
	if p := c.cfg.PoolFor(first); p != nil {
		g.NodeSelector = p.NodeSelector
	}
	return g, nil
}

func (c *announcerController) nodeStates() ([]owner.Node, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]owner.Node, 0, len(nodes))
	for _, n := range nodes {
		h := c.health.Health(n.Name)
		out = append(out, owner.Node{Name: n.Name, Labels: n.Labels, Deleting: n.DeletionTimestamp != nil, Healthy: h == AgentUp, Draining: h == AgentDraining})
	}
	return out, nil
}

// setAnnouncer writes, or with node "" removes, the announcer annotation with a merge
// patch of that one key, so no other field can be overwritten.
func (c *announcerController) setAnnouncer(ctx context.Context, svc *v1.Service, node string) error {
	var value any
	if node != "" {
		value = node
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotation.Announcer: value}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch %s of %s/%s: %w", annotation.Announcer, svc.Namespace, svc.Name, err)
	}
	return nil
}
