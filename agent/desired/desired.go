// Package desired decides which addresses a node announces, from the Services the ccm has
// given addresses and announcers.
//
// A node announces an address only when all three hold: a Service's announcer annotation
// names the node, the address is in that Service's status.loadBalancer.ingress, and the
// address lies inside a pool of the cloud-config. Anything else that names the node is
// refused with a reason, never announced: an agent that answers ARP for whatever an
// annotation says could take any address on the network away from its owner.
package desired

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Address is an address the node announces.
type Address struct {
	// Addr is the address.
	Addr netip.Addr
	// Pool is the pool the address lies in.
	Pool *config.Pool
	// Services are the Services ("namespace/name") that hold the address and name the
	// node as their announcer, sorted.
	Services []string
}

// Reason says why an address that names this node is not announced.
type Reason string

const (
	// NotInPool: the address lies outside every pool of the cloud-config.
	NotInPool Reason = "NotInPool"
	// NotAnAddress: an ingress entry has no IP, or one that does not parse.
	NotAnAddress Reason = "NotAnAddress"
	// NotLoadBalancer: the Service is not of type LoadBalancer.
	NotLoadBalancer Reason = "NotLoadBalancer"
	// OtherClass: the Service has a loadBalancerClass, so another implementation owns it.
	OtherClass Reason = "OtherClass"
)

// Reasons lists every Reason, for metrics that should show zeros.
var Reasons = []Reason{NotInPool, NotAnAddress, NotLoadBalancer, OtherClass}

// Refusal is an address, or a Service, that names this node but is not announced.
type Refusal struct {
	// Service is "namespace/name".
	Service string
	// Address is the ingress entry as written; empty when the whole Service is refused.
	Address string
	// Reason is why it is refused.
	Reason Reason
}

// String says what was refused and why, for logs.
func (r Refusal) String() string {
	what := r.Service
	if r.Address != "" {
		what = fmt.Sprintf("%s of %s", r.Address, r.Service)
	}
	switch r.Reason {
	case NotInPool:
		return what + " is outside every pool of the cloud-config"
	case NotAnAddress:
		return what + " is not an IP address"
	case NotLoadBalancer:
		return what + " is not of type LoadBalancer"
	case OtherClass:
		return what + " has a loadBalancerClass: another load balancer owns it"
	}
	return what + ": " + string(r.Reason)
}

// Compute returns the addresses node announces, sorted, and what names node but is
// refused, sorted by Service and address. The Services may come in any order.
func Compute(node string, services []*v1.Service, cfg *config.Config) ([]Address, []Refusal) {
	byAddr := map[netip.Addr]*Address{}
	var refused []Refusal
	for _, svc := range services {
		if svc.Annotations[annotation.Announcer] != node || node == "" {
			continue
		}
		key := svc.Namespace + "/" + svc.Name
		switch {
		case svc.Spec.Type != v1.ServiceTypeLoadBalancer:
			refused = append(refused, Refusal{Service: key, Reason: NotLoadBalancer})
			continue
		case svc.Spec.LoadBalancerClass != nil:
			refused = append(refused, Refusal{Service: key, Reason: OtherClass})
			continue
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			addr, err := netip.ParseAddr(ing.IP)
			if err != nil || addr.Zone() != "" {
				refused = append(refused, Refusal{Service: key, Address: cmp.Or(ing.IP, ing.Hostname), Reason: NotAnAddress})
				continue
			}
			addr = addr.Unmap()
			pool := cfg.PoolFor(addr)
			if pool == nil {
				refused = append(refused, Refusal{Service: key, Address: addr.String(), Reason: NotInPool})
				continue
			}
			a := byAddr[addr]
			if a == nil {
				a = &Address{Addr: addr, Pool: pool}
				byAddr[addr] = a
			}
			if !slices.Contains(a.Services, key) {
				a.Services = append(a.Services, key)
			}
		}
	}
	out := make([]Address, 0, len(byAddr))
	for _, a := range byAddr {
		slices.Sort(a.Services)
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Address) int { return a.Addr.Compare(b.Addr) })
	slices.SortFunc(refused, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Address, b.Address))
	})
	return out, refused
}
