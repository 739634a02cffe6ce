// Package lbstatus keeps every Service's status.loadBalancer.ingress equal to the
// addresses the allocator holds for it.
//
// The upstream service controller writes the status only after it ensured the load
// balancer, which it does when the Service's spec or annotations change, never when the
// status does. A status edited by hand, or written by a second leader that overlapped
// this one, would then stay: the agents would announce an address another Service holds,
// and the next leader would restore it from there. This controller notices a status
// change on its own watch, and writes back what the allocator holds, with a Warning event
// that names what was wrong. A writer that puts its status back each time is met with
// rewrites 2 s, 4 s, 8 s and 16 s apart, then left alone with one StatusContested event
// until the Service changes or 10 minutes have passed. It also ensures every Service
// again when the cloud-config changes, so that added pools serve the Services that wait
// for an address, and a Service that lost its address with its pool gets a new one.
package lbstatus

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/contest"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/controlloop"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Name is the controller's name, in main's controller list, its queue and its logs.
const Name = "baremetal-lb-status"

// ReasonStatusCorrected is the reason of the Warning event on a Service whose status
// listed addresses it does not hold.
const ReasonStatusCorrected = "StatusCorrected"

// ReasonStatusContested is the reason of the Warning event on a Service whose status
// another writer keeps changing back: the controller stops rewriting it for a while.
const ReasonStatusContested = contest.ReasonStatusContested

// finalizer is the upstream service controller's: a Service without it has not been taken
// up yet, and its addresses are the service controller's first business.
const finalizer = "service.kubernetes.io/load-balancer-cleanup"

// settle is how long after a status change the Service is checked: the upstream service
// controller writes the status right after it ensured the load balancer, and a status
// caught between the two is not a lie.
const settle = 300 * time.Millisecond

// Allocator is what the controller asks of the allocator beyond the LoadBalancer
// interface: a *provider.Cloud.
type Allocator interface {
	// Holders returns the Services ("namespace/name") the allocator gave addr to.
	Holders(addr netip.Addr) []string
	// Config returns the cloud-config in use.
	Config() *config.Config
}

var corrections = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      "baremetal_ccm",
	Name:           "status_corrections_total",
	Help:           "Service statuses that listed addresses the Service does not hold, or lacked one it holds, and were written back.",
	StabilityLevel: metrics.ALPHA,
})

var registerOnce sync.Once

// Controller keeps Service statuses true.
type Controller struct {
	lb       cloudprovider.LoadBalancer
	alloc    Allocator
	client   kubernetes.Interface
	recorder record.EventRecorder

	services corelisters.ServiceLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	contests contest.Contests
}

// New returns the controller over the Services of factory.
func New(lb cloudprovider.LoadBalancer, alloc Allocator, factory informers.SharedInformerFactory, client kubernetes.Interface, recorder record.EventRecorder) *Controller {
	registerOnce.Do(func() { legacyregistry.MustRegister(corrections) })
	services := factory.Core().V1().Services()
	c := &Controller{
		lb: lb, alloc: alloc, client: client, recorder: recorder,
		services: services.Lister(),
		synced:   services.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
	}
	_, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.Service)
			n, ok2 := cur.(*v1.Service)
			if ok1 && ok2 && !sameIngress(o.Status.LoadBalancer.Ingress, n.Status.LoadBalancer.Ingress) {
				c.queue.AddAfter(n.Namespace+"/"+n.Name, settle)
			}
		},
	})
	utilruntime.Must(err)
	return c
}

// Resync checks every Service now: for a cloud-config that changed.
func (c *Controller) Resync(*config.Config) {
	services, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range services {
		c.queue.Add(svc.Namespace + "/" + svc.Name)
	}
}

// Run checks Services with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controlloop.Run(ctx, Name, c.queue, c.synced, workers, c.sync, controlloop.Failure{Message: "Checking the Service's status failed, will retry", Key: "service"})
}

// sync ensures the Service's load balancer and writes its addresses to the status where
// the status says otherwise. It is idempotent.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r, _ := annotation.Parse(svc)
	if !r.Ours() || r.Deleting || !slices.Contains(svc.Finalizers, finalizer) {
		return nil
	}
	held, err := c.addresses(ctx, svc)
	if err != nil {
		return err // never a status written from an allocator that does not know yet
	}
	want := held
	// Ensure is idempotent: for a Service that holds its addresses it changes nothing; one
	// that waits for an address, or lost it with its pool, gets one now if it can. A refusal
	// is reported by the provider, and leaves the Service with what it held: the allocator
	// is all or nothing.
	if st, err := c.lb.EnsureLoadBalancer(ctx, "", svc, nil); err == nil {
		want = ips(st)
	}
	if slices.Equal(r.Ingress, want) && len(r.BadIngress) == 0 {
		c.contests.Settled(key)
		return nil
	}
	if wait, giveUp, warn := c.contests.Next(key, svc.Generation, time.Now()); wait > 0 || giveUp {
		if warn {
			theirs := list(r.Ingress)
			if len(r.BadIngress) > 0 {
				theirs += ", " + strings.Join(r.BadIngress, ", ")
			}
			c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonStatusContested, "another writer set status.loadBalancer.ingress of %s/%s to %s again after %d corrections; leaving it until the Service changes or %s have passed", svc.Namespace, svc.Name, theirs, contest.MaxRewrites, contest.Window)
			klog.InfoS("Service status contested, no longer corrected", "service", klog.KObj(svc), "theirs", theirs, "holds", want)
		}
		c.queue.AddAfter(key, wait)
		return nil
	}
	if why := c.lie(r, held); why != "" {
		corrections.Inc()
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonStatusCorrected, "status.loadBalancer.ingress %s; restored it to %s", why, list(want))
		klog.InfoS("Service status corrected", "service", klog.KObj(svc), "had", r.Ingress, "holds", want, "why", why)
	}
	return c.patchStatus(ctx, svc, want)
}

// addresses returns what the allocator holds for svc. It fails while the allocator has
// not restored the addresses of the Services' status.
func (c *Controller) addresses(ctx context.Context, svc *v1.Service) ([]netip.Addr, error) {
	st, exists, err := c.lb.GetLoadBalancer(ctx, "", svc)
	if err != nil || !exists {
		return nil, err
	}
	return ips(st), nil
}

// lie says how a Service's status differs from the addresses it held, or "" when the
// difference is the allocator's own doing: an address given for the first time, or taken
// away with its pool (which the provider's own event explains).
func (c *Controller) lie(r *annotation.Request, held []netip.Addr) string {
	cfg := c.alloc.Config()
	var wrong []string
	for _, a := range r.Ingress {
		if slices.Contains(held, a) {
			continue
		}
		switch holders := slices.DeleteFunc(c.alloc.Holders(a), func(s string) bool { return s == r.Service }); {
		case len(holders) > 0:
			wrong = append(wrong, fmt.Sprintf("%s, which %s holds", a, strings.Join(holders, ", ")))
		case cfg.PoolFor(a) != nil:
			wrong = append(wrong, fmt.Sprintf("%s, which this Service does not hold", a))
		}
	}
	wrong = append(wrong, r.BadIngress...)
	var missing []string
	for _, a := range held {
		if !slices.Contains(r.Ingress, a) {
			missing = append(missing, a.String())
		}
	}
	switch {
	case len(wrong) > 0 && len(missing) > 0:
		return fmt.Sprintf("listed %s and lacked %s", strings.Join(wrong, "; "), strings.Join(missing, ", "))
	case len(wrong) > 0:
		return "listed " + strings.Join(wrong, "; ")
	case len(missing) > 0:
		return "lacked " + strings.Join(missing, ", ") + ", which this Service holds"
	}
	return ""
}

// patchStatus writes addrs as the Service's ingress, with ipMode VIP as the provider
// returns them.
func (c *Controller) patchStatus(ctx context.Context, svc *v1.Service, addrs []netip.Addr) error {
	ingress := []v1.LoadBalancerIngress{}
	for _, a := range addrs {
		mode := v1.LoadBalancerIPModeVIP
		ingress = append(ingress, v1.LoadBalancerIngress{IP: a.String(), IPMode: &mode})
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch the status of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

func ips(st *v1.LoadBalancerStatus) []netip.Addr {
	if st == nil {
		return nil
	}
	var out []netip.Addr
	for _, ing := range st.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func list(addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return "no address"
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func sameIngress(a, b []v1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y v1.LoadBalancerIngress) bool { return x.IP == y.IP && x.Hostname == y.Hostname })
}
