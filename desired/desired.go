// Package desired decides which addresses a node announces, from the Services the ccm has
// given addresses and announcers.
//
// A node announces an address only when all of these hold: the node is the first of the
// Service's plan (its announcer annotation, then its standbys) that is not down, the
// Service is this load balancer's (annotation.Parse), the
// address is in its status.loadBalancer.ingress, the address lies inside a pool of the
// cloud-config, and that pool's nodeSelector selects the node. Anything else that names
// the node is refused with a reason, never announced: an agent that answers ARP for
// whatever an annotation says could take any address on the network away from its owner.
package desired

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Address is an address the node announces.
type Address struct {
	// Addr is the address.
	Addr netip.Addr
	// Pool is the pool the address lies in.
	Pool *config.Pool
	// Services are the Services ("namespace/name") that hold the address and whose plan
	// gives it to the node, sorted.
	Services []string
	// Covers are the nodes ahead of this one in the plan of a Service of the address,
	// down, whose place this node takes: empty when the annotations name this node as
	// the announcer.
	Covers []string
	// Lingering says the address has moved to another node and this node, draining,
	// still answers requests for it until it exits, but announces nothing: a gratuitous
	// announcement now would draw the clients back from the new announcer.
	Lingering bool
}

// Down tells whether a node is down: its agent does not answer, or the ccm says so.
type Down func(node string) bool

// Announcer returns the node that announces a Service's addresses now: the first of its
// plan that is not down (the annotated announcer, or the standby that stands in for it),
// with the nodes ahead of it, or "" for none.
func Announcer(r *annotation.Request, down Down) (node string, covers []string) {
	plan := r.Plan()
	for i, n := range plan {
		if !down(n) {
			return n, plan[:i]
		}
	}
	return "", nil
}

// Peers returns the other nodes of every plan node is in, sorted: the nodes whose
// addresses it takes over should they go down, and those that take its own over.
func Peers(node string, services []*v1.Service) []string {
	return PeersOf(node, parse(services))
}

// PeersOf is Peers of the Services' requests, as annotation.Parse reads them.
func PeersOf(node string, requests []*annotation.Request) []string {
	var out []string
	for _, r := range requests {
		if !r.Announced() {
			continue
		}
		if plan := r.Plan(); slices.Contains(plan, node) {
			out = append(out, slices.DeleteFunc(plan, func(n string) bool { return n == node })...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Reason says why an address that names this node is not announced.
type Reason string

const (
	// NotInPool means the address lies outside every pool of the cloud-config.
	NotInPool Reason = "NotInPool"
	// NotAnAddress means an ingress entry has no IP, or one that does not parse.
	NotAnAddress Reason = "NotAnAddress"
	// NotLoadBalancer means the Service is not of type LoadBalancer.
	NotLoadBalancer Reason = "NotLoadBalancer"
	// OtherClass means the Service has a loadBalancerClass, so another implementation
	// owns it.
	OtherClass Reason = "OtherClass"
	// NodeNotSelected means the address's pool has a nodeSelector that does not select
	// this node.
	NodeNotSelected Reason = "NodeNotSelected"
)

// Reasons lists every Reason, for metrics that should show zeros.
var Reasons = []Reason{NotInPool, NotAnAddress, NotLoadBalancer, OtherClass, NodeNotSelected}

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
	case NodeNotSelected:
		return what + " is in a pool whose nodeSelector does not select this node"
	}
	return what + ": " + string(r.Reason)
}

// Compute returns the addresses node announces, sorted, and what names node but is
// refused, sorted by Service and address. nodeLabels are the node's labels, for the pools'
// nodeSelectors; down says which nodes are down. The Services may come in any order.
func Compute(node string, nodeLabels labels.Set, services []*v1.Service, cfg *config.Config, down Down) ([]Address, []Refusal) {
	return ComputeOf(node, nodeLabels, parse(services), cfg, down, nil)
}

// parse reads the requests of services.
func parse(services []*v1.Service) []*annotation.Request {
	out := make([]*annotation.Request, len(services))
	for i, svc := range services {
		out[i], _ = annotation.Parse(svc)
	}
	return out
}

// ComputeOf is Compute of the Services' requests, as annotation.Parse reads them: a
// caller that keeps them parsed spares parsing thousands of Services at every change.
// coveredBy are the peers that said they stand in for node while no ccm was heard: node
// announces nothing of a plan that names one of them, and keeps the others.
func ComputeOf(node string, nodeLabels labels.Set, requests []*annotation.Request, cfg *config.Config, down Down, coveredBy []string) ([]Address, []Refusal) {
	byAddr := addresses{}
	var refused []Refusal
	withdrawn := func(n string) bool { return n == node || down(n) }
	assign := func(r *annotation.Request) (string, []string) {
		d := down
		if len(coveredBy) > 0 && slices.ContainsFunc(r.Plan(), func(n string) bool { return slices.Contains(coveredBy, n) }) {
			d = withdrawn
		}
		return Announcer(r, d)
	}
	planner := planners(requests)
	for _, r := range requests {
		announcer, covers := assign(r)
		if !r.Ours() {
			if announcer == node && node != "" {
				reason := NotLoadBalancer
				if r.Ownership == annotation.OtherClass {
					reason = OtherClass
				}
				refused = append(refused, Refusal{Service: r.Service, Reason: reason})
			}
			continue
		}
		if node == "" {
			continue
		}
		if announcer == node {
			for _, bad := range r.BadIngress {
				refused = append(refused, Refusal{Service: r.Service, Address: bad, Reason: NotAnAddress})
			}
		}
		for _, addr := range r.Ingress {
			announcer, covers := announcer, covers
			if p := planner[addr]; p != nil && p != r {
				announcer, covers = assign(p)
			}
			if announcer != node {
				continue
			}
			pool, reason := admit(addr, cfg, nodeLabels)
			if reason != "" {
				refused = append(refused, Refusal{Service: r.Service, Address: addr.String(), Reason: reason})
				continue
			}
			byAddr.add(addr, pool, r.Service, covers)
		}
	}
	out := byAddr.sorted()
	slices.SortFunc(refused, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Address, b.Address))
	})
	return out, refused
}

// addresses gathers what a node announces, each address once with its Services and the
// nodes it stands in for.
type addresses map[netip.Addr]*Address

// add records addr, of pool, for service, standing in for covers.
func (m addresses) add(addr netip.Addr, pool *config.Pool, service string, covers []string) {
	a := m[addr]
	if a == nil {
		a = &Address{Addr: addr, Pool: pool}
		m[addr] = a
	}
	if !slices.Contains(a.Services, service) {
		a.Services = append(a.Services, service)
	}
	a.Covers = append(a.Covers, covers...)
}

// sorted returns the addresses in order, each with its Services and covers sorted, the
// covers once each.
func (m addresses) sorted() []Address {
	out := make([]Address, 0, len(m))
	for _, a := range m {
		slices.Sort(a.Services)
		slices.Sort(a.Covers)
		a.Covers = slices.Compact(a.Covers)
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Address) int { return a.Addr.Compare(b.Addr) })
	return out
}

// admit returns the pool of an address a node with nodeLabels may announce, or why it
// may not.
func admit(addr netip.Addr, cfg *config.Config, nodeLabels labels.Set) (*config.Pool, Reason) {
	pool := cfg.PoolFor(addr)
	switch {
	case pool == nil:
		return nil, NotInPool
	case pool.NodeSelector != nil && !pool.NodeSelector.Matches(nodeLabels):
		return nil, NodeNotSelected
	}
	return pool, ""
}

// Assignments returns, for every node, the addresses ComputeOf gives it, sorted: what the
// ccm expects each agent to announce, from the same plans and the same verdict.
// labelsOf returns a node's labels, for the pools' nodeSelectors.
func Assignments(requests []*annotation.Request, cfg *config.Config, labelsOf func(node string) labels.Set, down Down) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for addr, r := range planners(requests) {
		if node, _ := Announcer(r, down); node != "" {
			if _, reason := admit(addr, cfg, labelsOf(node)); reason == "" {
				out[node] = append(out[node], addr)
			}
		}
	}
	for node, addrs := range out {
		slices.SortFunc(addrs, netip.Addr.Compare)
		out[node] = slices.Compact(addrs)
	}
	return out
}
