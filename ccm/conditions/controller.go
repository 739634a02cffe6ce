package conditions

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/contest"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/controlloop"
)

// Name is the controller's name: its client's, its queue's, and the field manager that
// owns the conditions it writes.
const Name = "baremetal-lb-conditions"

// Source is where the controller learns what the announcer decided: a
// *announcer.Controller.
type Source interface {
	// Announcement returns the announcer's last decision for the Service
	// "namespace/name", false before it made one.
	Announcement(service string) (announcer.Announcement, bool)
	// OnAnnouncement registers a function called with the Services whose Announcement
	// changed.
	OnAnnouncement(func(services []string))
}

var writes = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      "baremetal_ccm",
	Name:           "condition_writes_total",
	Help:           "Writes of the load-balancer conditions of Services (LoadBalancerProvisioning, LoadBalancerServing, LoadBalancerDegraded): one per change of what they say, none in steady state.",
	StabilityLevel: metrics.ALPHA,
})

var registerOnce sync.Once

// Controller writes the conditions Want gives each Service, when they differ from those
// the Service carries.
type Controller struct {
	client   kubernetes.Interface
	source   Source
	recorder record.EventRecorder

	services corelisters.ServiceLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	contests contest.Contests

	mu sync.Mutex
	// applied is, per Service, what this controller last applied, and the version of the
	// Service it was made from.
	applied map[string]applied
}

// applied is an apply of this controller: the conditions it sent (none to take its own
// away), from the Service at resourceVersion.
type applied struct {
	resourceVersion string
	conditions      []metav1.Condition
}

// New returns the controller over the Services of factory, writing with client and told
// of the announcer's decisions by source.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder, source Source) *Controller {
	registerOnce.Do(func() { legacyregistry.MustRegister(writes) })
	services := factory.Core().V1().Services()
	c := &Controller{
		client: client, source: source, recorder: recorder,
		services: services.Lister(),
		synced:   services.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		applied: map[string]applied{},
	}
	_, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.forget(key)
			}
		},
	})
	utilruntime.Must(err)
	source.OnAnnouncement(func(services []string) {
		for _, s := range services {
			c.queue.Add(s)
		}
	})
	return c
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// forget drops what is known of a deleted Service.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	delete(c.applied, key)
	c.mu.Unlock()
	c.contests.Settled(key)
}

// Run writes conditions with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controlloop.Run(ctx, Name, c.queue, c.synced, workers, c.sync, controlloop.Failure{Message: "Writing the Service's conditions failed, will retry", Key: "service"})
}

// sync writes the Service's conditions where they differ from what they should say. It
// is idempotent: with nothing changed, it writes nothing.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	r, _ := annotation.Parse(svc)
	var a *announcer.Announcement
	if r.Announced() {
		if got, ok := c.source.Announcement(key); ok {
			a = &got
		}
	}
	want, ok := Want(r, a, svc.Generation)
	if !ok {
		return nil
	}
	next, changed := Next(svc.Status.Conditions, want, time.Now())
	if !changed {
		c.contests.Settled(key)
		return nil
	}
	c.mu.Lock()
	last, wrote := c.applied[key]
	c.mu.Unlock()
	if wrote && Equal(last.conditions, next) {
		switch {
		case last.resourceVersion == svc.ResourceVersion:
			return nil // the cache has not seen the apply yet
		case len(next) == 0:
			// This controller took its own conditions away: those of its types left are
			// another writer's, on a Service that is not the ccm's, and stay.
			return nil
		}
		// The Service carried these, and someone changed them back since. The contest is
		// about what this controller has to say: once that changes, it says it at once.
		if wait, giveUp, warn := c.contests.Next(key, fingerprint(next), time.Now()); wait > 0 || giveUp {
			if warn {
				c.recorder.Eventf(svc, v1.EventTypeWarning, contest.ReasonStatusContested, "another writer changed status.conditions of %s/%s again after %d corrections (%s); leaving them until what the ccm has to say changes or %s have passed", svc.Namespace, svc.Name, contest.MaxRewrites, summary(ours(svc.Status.Conditions)), contest.Window)
				klog.InfoS("Service conditions contested, no longer corrected", "service", klog.KObj(svc), "theirs", summary(ours(svc.Status.Conditions)), "want", summary(next))
			}
			c.queue.AddAfter(key, wait)
			return nil
		}
	}
	if err := c.apply(ctx, svc, next); err != nil {
		return err
	}
	c.mu.Lock()
	c.applied[key] = applied{resourceVersion: svc.ResourceVersion, conditions: next}
	c.mu.Unlock()
	writes.Inc()
	klog.V(2).InfoS("Service conditions changed", "service", klog.KObj(svc), "from", summary(ours(svc.Status.Conditions)), "to", summary(next))
	return nil
}

// apply makes conditions the Service's conditions of this controller's: a server-side
// apply of the status, as field manager Name, of those conditions alone. The API server
// merges it into status.conditions by type, so the conditions of other types stay, and
// takes away those of this controller's it owns and conditions leaves out: its own, not
// another writer's of the same type. It is forced: a condition of this controller's that
// someone changed is this controller's again. Neither status.loadBalancer, which the
// service controller and the lb-status controller write, nor anything else is in it.
func (c *Controller) apply(ctx context.Context, svc *v1.Service, conditions []metav1.Condition) error {
	ac := corev1ac.Service(svc.Name, svc.Namespace)
	if len(conditions) > 0 {
		status := corev1ac.ServiceStatus()
		for _, cond := range conditions {
			status.WithConditions(metav1ac.Condition().
				WithType(cond.Type).WithStatus(cond.Status).WithReason(cond.Reason).WithMessage(cond.Message).
				WithObservedGeneration(cond.ObservedGeneration).WithLastTransitionTime(cond.LastTransitionTime))
		}
		ac.WithStatus(status)
	}
	_, err := c.client.CoreV1().Services(svc.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: Name, Force: true})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsInvalid(err):
		// Nothing this controller can send makes it valid (another writer's field in a
		// condition it took away): trying again before the Service changes cannot help.
		klog.ErrorS(err, "The API server refused the Service's conditions; not retried until the Service changes", "service", klog.KObj(svc))
		return nil
	case err != nil:
		return fmt.Errorf("apply the conditions of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// fingerprint is a hash of what conditions say, lastTransitionTime apart, as Equal
// compares them.
func fingerprint(conditions []metav1.Condition) int64 {
	h := fnv.New64a()
	for _, c := range conditions {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%d\x00", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return int64(h.Sum64())
}

// ours returns the conditions of the types in Types.
func ours(conditions []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range conditions {
		if slices.Contains(Types, c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// summary says conditions in a log line: "LoadBalancerServing=True/Serving, ...".
func summary(conditions []metav1.Condition) string {
	if len(conditions) == 0 {
		return "none"
	}
	s := make([]string, len(conditions))
	for i, c := range conditions {
		s[i] = fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason)
	}
	return strings.Join(s, ", ")
}
