package annotation

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Ownership says whether a Service is this load balancer's to serve, or why not.
type Ownership string

// The values of Ownership.
const (
	// Ours: a Service of type LoadBalancer without a loadBalancerClass.
	Ours Ownership = ""
	// NotLoadBalancer: the Service is not of type LoadBalancer.
	NotLoadBalancer Ownership = "NotLoadBalancer"
	// OtherClass: the Service names a loadBalancerClass, so another implementation serves it.
	OtherClass Ownership = "OtherClass"
)

// Request is what a Service asks of the load balancer, read from its spec, annotations
// and status by Parse.
type Request struct {
	// Service is "namespace/name", the name the allocator and the events know it by.
	Service   string
	Namespace string
	Labels    labels.Set
	// Ownership is Ours, or why the Service is not this load balancer's.
	Ownership Ownership
	// Deleting is true once the Service has a deletion timestamp.
	Deleting bool

	// Pool is the pool asked for; empty lets the allocator choose.
	Pool string
	// Families are the families wanted, in the order of spec.ipFamilies.
	Families []iprange.Family
	// PreferDualStack says the second family is wanted only where a pool offers it.
	PreferDualStack bool
	// Addresses are the exact addresses asked for, at most one per family.
	Addresses []netip.Addr
	// SharingKey is the allow-shared-ip key as written, trimmed; empty when not sharing.
	SharingKey string
	// SharingNamespaces are the namespaces whose Services may share the address under
	// the key: the Service's own and those it names, sorted. Services share only when
	// their keys and these lists are equal, so sharing across namespaces needs both sides.
	SharingNamespaces []string
	// Ports are the Service's ports, which Services sharing an address must not repeat.
	Ports []ipam.Port
	// PreferredNodes are node names in order of preference.
	PreferredNodes []string
	// Local is true for externalTrafficPolicy Local: only a node with a ready endpoint of
	// the Service may announce it.
	Local bool

	// Ingress are the addresses in status.loadBalancer.ingress, in order.
	Ingress []netip.Addr
	// BadIngress are the ingress entries that are not a usable address, as written.
	BadIngress []string
	// Announcer is the node the ccm named to announce the addresses, "" for none.
	Announcer string
	// Standbys are the nodes the ccm named to take the addresses over, in order.
	Standbys []string
}

// Plan returns the announcer followed by the standbys: the order in which nodes announce
// the addresses as those before them go down. Empty when no node announces.
func (r *Request) Plan() []string {
	if r.Announcer == "" {
		return nil
	}
	out := []string{r.Announcer}
	for _, n := range r.Standbys {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Ours reports whether the Service is this load balancer's to serve.
func (r *Request) Ours() bool { return r.Ownership == Ours }

// Announced reports whether the Service's addresses are to be announced: it is ours, not
// being deleted, and holds addresses.
func (r *Request) Announced() bool { return r.Ours() && !r.Deleting && len(r.Ingress) > 0 }

// SharingGroup names the Services that may share the address: "" when the Service shares
// with none, else the sharing namespaces and the key, as in "team-a,team-b/web". A
// namespace never holds a comma or a slash, so two different groups never read the same.
func (r *Request) SharingGroup() string {
	if r.SharingKey == "" {
		return ""
	}
	return strings.Join(r.SharingNamespaces, ",") + "/" + r.SharingKey
}

// Group names the address group of the Service: the Services that share its address
// (and so its announcer), or the Service alone.
func (r *Request) Group() string {
	if g := r.SharingGroup(); g != "" {
		return "shared/" + g
	}
	return "service/" + r.Service
}

// Allocation is the allocator's view of the request.
func (r *Request) Allocation() ipam.Request {
	return ipam.Request{
		Service: r.Service, Namespace: r.Namespace, Labels: r.Labels, Pool: r.Pool,
		Families: r.Families, Addresses: r.Addresses,
		SharingKey: r.SharingGroup(), Ports: r.Ports,
	}
}

// Parse reads a Service's request. The error joins a *FieldError for every field that
// cannot be used; the Request then holds every field that could be read, so that, for
// example, a Service whose ips annotation went bad still shares what it shared.
func Parse(svc *v1.Service) (*Request, error) {
	r := &Request{
		Service:   svc.Namespace + "/" + svc.Name,
		Namespace: svc.Namespace,
		Labels:    labels.Set(svc.Labels),
		Deleting:  svc.DeletionTimestamp != nil,
		Local:     svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal,
	}
	switch {
	case svc.Spec.Type != v1.ServiceTypeLoadBalancer:
		r.Ownership = NotLoadBalancer
	case svc.Spec.LoadBalancerClass != nil:
		r.Ownership = OtherClass
	}
	for _, p := range svc.Spec.Ports {
		r.Ports = append(r.Ports, ipam.Port{Protocol: string(p.Protocol), Port: p.Port})
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && iprange.CheckServiceAddress(a) == nil {
			r.Ingress = append(r.Ingress, a)
		} else if ing.IP != "" {
			r.BadIngress = append(r.BadIngress, ing.IP)
		} else {
			r.BadIngress = append(r.BadIngress, ing.Hostname)
		}
	}

	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	pool, err := read(svc, Pool)
	add(err)
	r.Pool = strings.TrimSpace(pool)
	r.Families, r.PreferDualStack, err = families(svc)
	add(err)
	r.Addresses, err = addresses(svc, r.Families)
	add(err)
	r.SharingKey, r.SharingNamespaces, err = sharing(svc)
	add(err)
	r.PreferredNodes, err = names(svc, PreferredNodes, validation.IsDNS1123Subdomain)
	add(err)
	r.Announcer, err = announcer(svc)
	add(err)
	r.Standbys, err = names(svc, Standbys, validation.IsDNS1123Subdomain)
	add(err)
	return r, errors.Join(errs...)
}

// families returns the families the Service's load balancer should have, in the order of
// spec.ipFamilies. The API server always fills ipFamilies; the fallback to IPv4 is for
// Services that reach us without it.
func families(svc *v1.Service) ([]iprange.Family, bool, error) {
	if len(svc.Spec.IPFamilies) == 0 {
		return []iprange.Family{iprange.IPv4}, false, nil
	}
	var out []iprange.Family
	for i, f := range svc.Spec.IPFamilies {
		switch f {
		case v1.IPv4Protocol:
			out = append(out, iprange.IPv4)
		case v1.IPv6Protocol:
			out = append(out, iprange.IPv6)
		default:
			return nil, false, &FieldError{Field: fmt.Sprintf("spec.ipFamilies[%d]", i), Value: string(f), Reason: "not IPv4 or IPv6"}
		}
	}
	policy := svc.Spec.IPFamilyPolicy
	if policy == nil || *policy == v1.IPFamilyPolicySingleStack {
		out = out[:1]
	}
	return out, policy != nil && *policy == v1.IPFamilyPolicyPreferDualStack && len(out) == 2, nil
}

// addresses reads lb.baremetal.io/ips and spec.loadBalancerIP, which must agree when both
// are set.
func addresses(svc *v1.Service, families []iprange.Family) ([]netip.Addr, error) {
	_, fromAnnotation := svc.Annotations[IPs]
	value, field := svc.Spec.LoadBalancerIP, "spec.loadBalancerIP"
	if fromAnnotation {
		var err error
		if value, err = read(svc, IPs); err != nil {
			return nil, err
		}
		field = IPs
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var out []netip.Addr
	var seen [2]bool
	for _, s := range strings.Split(value, ",") {
		s = strings.TrimSpace(s)
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return nil, &FieldError{Field: field, Value: value, Reason: fmt.Sprintf("%q is not an IP address", clip(s))}
		}
		if err := iprange.CheckServiceAddress(addr); err != nil {
			return nil, &FieldError{Field: field, Value: value, Reason: err.Error()}
		}
		f := iprange.FamilyOf(addr)
		if seen[f] {
			return nil, &FieldError{Field: field, Value: value, Reason: fmt.Sprintf("more than one %s address", f)}
		}
		seen[f] = true
		if !slices.Contains(families, f) {
			return nil, &FieldError{Field: field, Value: value, Reason: fmt.Sprintf("%s is %s, but the Service's ipFamilies are %v", addr, f, svc.Spec.IPFamilies)}
		}
		out = append(out, addr)
	}
	if fromAnnotation && svc.Spec.LoadBalancerIP != "" {
		if ip, err := netip.ParseAddr(svc.Spec.LoadBalancerIP); err != nil || !slices.Contains(out, ip) {
			return nil, &FieldError{Field: "spec.loadBalancerIP", Value: svc.Spec.LoadBalancerIP,
				Reason: fmt.Sprintf("disagrees with %s=%q; set only one of them", IPs, clip(value))}
		}
	}
	return out, nil
}

// sharing reads the sharing key and the namespaces that may share under it. A bad
// namespace list keeps the key within the Service's own namespace.
func sharing(svc *v1.Service) (string, []string, error) {
	key, err := read(svc, AllowSharedIP)
	if err != nil {
		// A key over the limit is no key: the Service shares with no one.
		return "", nil, err
	}
	key = strings.TrimSpace(key)
	namespaces := []string{svc.Namespace}
	others, err := names(svc, SharedIPNamespaces, validation.IsDNS1123Label)
	if err == nil {
		namespaces = append(namespaces, others...)
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	if key == "" {
		if len(others) > 0 {
			err = errors.Join(err, &FieldError{Field: SharedIPNamespaces, Value: svc.Annotations[SharedIPNamespaces],
				Reason: fmt.Sprintf("names namespaces to share with, but the Service has no %s key", AllowSharedIP)})
		}
		return "", nil, err
	}
	return key, namespaces, err
}

// names reads a comma-separated list of Kubernetes names from annotation key, in order,
// without repeats. The first invalid name is reported. Within the list's limit the search
// for repeats costs less than a set would.
func names(svc *v1.Service, key string, valid func(string) []string) ([]string, error) {
	value, err := read(svc, key)
	if err != nil {
		return nil, err
	}
	var out []string
	for n := range strings.SplitSeq(value, ",") {
		if n = strings.TrimSpace(n); n == "" || slices.Contains(out, n) {
			continue
		}
		if err := checkName(key, value, n, valid); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// announcer reads the node the ccm named to announce. Agents answer for the addresses on
// its word, so a value that is no node's name is reported and never used.
func announcer(svc *v1.Service) (string, error) {
	value, err := read(svc, Announcer)
	if err != nil {
		return "", err
	}
	n := strings.TrimSpace(value)
	if n == "" {
		return "", nil
	}
	if err := checkName(Announcer, value, n, validation.IsDNS1123Subdomain); err != nil {
		return "", err
	}
	return n, nil
}

// checkName returns a *FieldError of annotation key, whose value is value, when the name n
// in it is not valid.
func checkName(key, value, n string, valid func(string) []string) error {
	if problems := valid(n); len(problems) > 0 {
		return &FieldError{Field: key, Value: value, Reason: fmt.Sprintf("%q is not a valid name: %s", clip(n), strings.Join(problems, "; "))}
	}
	return nil
}
