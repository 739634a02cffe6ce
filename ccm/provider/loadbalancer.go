package provider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Event reasons recorded on Services.
const (
	ReasonAddressAssigned  = "AddressAssigned"
	ReasonAddressReleased  = "AddressReleased"
	ReasonAddressConflict  = "AddressConflict"
	ReasonInvalidRequest   = "InvalidLoadBalancerRequest"
	ReasonAddressInUse     = "AddressInUse"
	ReasonPoolExhausted    = "PoolExhausted"
	ReasonAddressNotInPool = "AddressNotInPool"
	ReasonPoolNotAllowed   = "PoolNotAllowed"
	ReasonUnknownPool      = "UnknownPool"
	ReasonFamilyNotOffered = "FamilyNotOffered"
)

// syncRetry is how soon the service controller retries while the Service cache syncs.
const syncRetry = time.Second

// loadBalancer implements cloudprovider.LoadBalancer: a Service's "load balancer" is its
// addresses, announced by the agents.
type loadBalancer struct {
	cfg   atomic.Pointer[config.Config]
	alloc *ipam.Allocator

	// locks serialises calls for one Service; the service controller runs several
	// workers, and a Service may also be synced by its deletion path.
	locks keymutex.KeyMutex

	recorder       record.EventRecorder
	services       corelisters.ServiceLister
	servicesSynced cache.InformerSynced

	restoreMu sync.Mutex
	restored  bool
}

var _ cloudprovider.LoadBalancer = (*loadBalancer)(nil)

// ready rebuilds the allocator from the addresses recorded in every Service's status, once,
// before the first allocation. Until the Service cache has synced it returns a RetryError:
// allocating from a partial view could hand out an address some Service already holds.
func (lb *loadBalancer) ready() error {
	lb.restoreMu.Lock()
	defer lb.restoreMu.Unlock()
	if lb.restored {
		return nil
	}
	if lb.servicesSynced == nil || !lb.servicesSynced() {
		return api.NewRetryError("waiting for the Service cache to sync before assigning addresses", syncRetry)
	}
	services, err := lb.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing Services to restore assigned addresses: %w", err)
	}
	// The oldest Service keeps an address that two claim: it most likely had it first.
	slices.SortFunc(services, func(a, b *v1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	byKey := make(map[string]*v1.Service, len(services))
	var assignments []ipam.Assignment
	for _, svc := range services {
		// A request that no longer parses still owns what its status says, and shares it
		// under the key it shared it with: Parse returns what it could read.
		r, _ := annotation.Parse(svc)
		if r.Ownership == annotation.OtherClass || len(r.Ingress) == 0 {
			continue
		}
		byKey[r.Service] = svc
		assignments = append(assignments, ipam.Assignment{Service: r.Service, Namespace: r.Namespace, Labels: r.Labels, Pool: r.Pool,
			Addresses: r.Ingress, SharingKey: r.SharingGroup(), Ports: r.Ports})
	}
	err = lb.alloc.Restore(assignments)
	for _, e := range unwrapJoined(err) {
		var dup *ipam.DuplicateError
		var refused *ipam.NotRestoredError
		switch {
		case errors.As(e, &dup):
			lb.event(byKey[dup.Service], v1.EventTypeWarning, ReasonAddressConflict,
				"Address %s is also in the status of %s, which had it first; this Service gets another address", dup.Addr, dup.Holder)
			klog.ErrorS(e, "Address not restored", "service", dup.Service, "address", dup.Addr)
		case errors.As(e, &refused):
			if refused.Addr.IsValid() {
				lb.event(byKey[refused.Service], v1.EventTypeWarning, refusalReason(refused.Reason), "%s", restoreRefusal(refused))
			}
			klog.ErrorS(e, "Address not restored", "service", refused.Service, "address", refused.Addr)
		default:
			klog.ErrorS(e, "Address not restored")
		}
	}
	lb.restored = true
	restoredServices.Set(float64(len(assignments)))
	updatePoolMetrics(lb.alloc)
	klog.InfoS("Restored assigned addresses from Service status", "services", len(assignments))
	return nil
}

// GetLoadBalancer reports the addresses a Service holds.
func (lb *loadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	if err := lb.ready(); err != nil {
		return nil, false, err
	}
	addrs := lb.alloc.Addresses(serviceKey(svc))
	if len(addrs) == 0 {
		return nil, false, nil
	}
	return statusFor(addrs), true, nil
}

// GetLoadBalancerName returns the name the cloud-controller-manager uses in its logs.
func (lb *loadBalancer) GetLoadBalancerName(ctx context.Context, clusterName string, svc *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// EnsureLoadBalancer assigns the Service its addresses and returns them as its status.
// Calling it again for an unchanged Service changes nothing.
func (lb *loadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) (*v1.LoadBalancerStatus, error) {
	if err := lb.ready(); err != nil {
		return nil, err
	}
	key := serviceKey(svc)
	lb.locks.LockKey(key)
	defer func() { _ = lb.locks.UnlockKey(key) }()

	before := lb.alloc.Addresses(key)
	addrs, err := lb.assign(svc)
	if err != nil {
		reason := refusalReason(err)
		allocationRefusals.WithLabelValues(reason).Inc()
		lb.event(svc, v1.EventTypeWarning, reason, "%s", refusalMessage(svc, err))
		klog.V(2).InfoS("Refused load balancer address", "service", klog.KObj(svc), "reason", reason, "err", err)
		return nil, err
	}
	// The allocator's change, not the status's: a status that lags or was edited is
	// package lbstatus's to report.
	if !sameAddresses(before, addrs) {
		allocations.Inc()
		updatePoolMetrics(lb.alloc)
		lb.event(svc, v1.EventTypeNormal, ReasonAddressAssigned, "Assigned %s", lb.describe(addrs))
		klog.V(2).InfoS("Assigned load balancer addresses", "service", klog.KObj(svc), "addresses", addrs, "previous", before)
	}
	return statusFor(addrs), nil
}

// assign asks the allocator for the Service's addresses. A PreferDualStack Service gets
// its second family only where a pool offers it.
func (lb *loadBalancer) assign(svc *v1.Service) ([]netip.Addr, error) {
	r, err := annotation.Parse(svc)
	if err != nil {
		return nil, err
	}
	req := r.Allocation()
	addrs, err := lb.alloc.Assign(req)
	if err == nil || !r.PreferDualStack {
		return addrs, err
	}
	var notOffered *ipam.FamilyNotOfferedError
	var exhausted *ipam.ExhaustedError
	if (errors.As(err, &notOffered) && notOffered.Family == req.Families[1]) || (errors.As(err, &exhausted) && exhausted.Family == req.Families[1]) {
		req.Families = req.Families[:1]
		req.Addresses = slices.DeleteFunc(req.Addresses, func(a netip.Addr) bool { return iprange.FamilyOf(a) != req.Families[0] })
		return lb.alloc.Assign(req)
	}
	return nil, err
}

// UpdateLoadBalancer has nothing to do: the set of nodes does not change a Service's
// addresses, and which node announces them is the announcer's decision.
func (lb *loadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *v1.Service, nodes []*v1.Node) error {
	return nil
}

// EnsureLoadBalancerDeleted releases the Service's addresses.
func (lb *loadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *v1.Service) error {
	if err := lb.ready(); err != nil {
		return err
	}
	key := serviceKey(svc)
	lb.locks.LockKey(key)
	defer func() { _ = lb.locks.UnlockKey(key) }()

	addrs := lb.alloc.Addresses(key)
	if !lb.alloc.Release(key) {
		return nil
	}
	releases.Inc()
	updatePoolMetrics(lb.alloc)
	lb.event(svc, v1.EventTypeNormal, ReasonAddressReleased, "Released %s", lb.describe(addrs))
	klog.V(2).InfoS("Released load balancer addresses", "service", klog.KObj(svc), "addresses", addrs)
	return nil
}

func (lb *loadBalancer) event(svc *v1.Service, eventType, reason, format string, args ...any) {
	if lb.recorder == nil || svc == nil {
		return
	}
	lb.recorder.Eventf(svc, eventType, reason, format, args...)
}

// describe writes addresses with their pools, as in "198.51.100.1 (pool default)".
func (lb *loadBalancer) describe(addrs []netip.Addr) string {
	s := ""
	for i, a := range addrs {
		if i > 0 {
			s += ", "
		}
		s += a.String()
		if p := lb.cfg.Load().PoolFor(a); p != nil {
			s += fmt.Sprintf(" (pool %s)", p.Name)
		}
	}
	return s
}

// ingressOf returns the addresses in a Service's status, in order.
func ingressOf(svc *v1.Service) []netip.Addr {
	r, _ := annotation.Parse(svc)
	return r.Ingress
}

// serviceKey names a Service as the allocator knows it.
func serviceKey(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// statusFor returns the status for addrs. ipMode VIP is set explicitly: the address is
// delivered to the node with its destination unchanged, so kube-proxy must handle it.
func statusFor(addrs []netip.Addr) *v1.LoadBalancerStatus {
	st := &v1.LoadBalancerStatus{}
	for _, a := range addrs {
		mode := v1.LoadBalancerIPModeVIP
		st.Ingress = append(st.Ingress, v1.LoadBalancerIngress{IP: a.String(), IPMode: &mode})
	}
	return st
}

func unwrapJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// isRestored reports whether the allocator holds the addresses of the Services' status.
func (lb *loadBalancer) isRestored() bool {
	lb.restoreMu.Lock()
	defer lb.restoreMu.Unlock()
	return lb.restored
}

// setConfig moves the allocator to cfg's pools. A Service whose address no pool contains
// any more loses it, with a Warning event: the agents withdraw such an address, so keeping
// it would be an outage; it gets a new one when its load balancer is next ensured.
func (lb *loadBalancer) setConfig(cfg *config.Config) {
	lb.restoreMu.Lock()
	defer lb.restoreMu.Unlock()
	lb.cfg.Store(cfg)
	dropped := lb.alloc.SetPools(cfg.Pools)
	updatePoolMetrics(lb.alloc)
	for _, d := range dropped {
		klog.InfoS("Address released: no pool of the cloud-config contains it any more", "service", d.Service, "address", d.Addr)
		ns, name, _ := cache.SplitMetaNamespaceKey(d.Service)
		if lb.services == nil {
			continue
		}
		if svc, err := lb.services.Services(ns).Get(name); err == nil {
			lb.event(svc, v1.EventTypeWarning, ReasonAddressNotInPool,
				"Address %s is in no pool of the cloud-config any more; this Service gets another address", d.Addr)
		}
	}
}

// sameAddresses reports whether a and b hold the same addresses, in any order.
func sameAddresses(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(a, b)
}
