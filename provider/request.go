package provider

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// FieldError is a Service field or annotation whose value cannot be used.
type FieldError struct {
	Field  string // an annotation key or a spec field path
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Reason)
}

// serviceKey names a Service as the allocator knows it.
func serviceKey(svc *v1.Service) string { return svc.Namespace + "/" + svc.Name }

// requestFor reads what a Service asks of the allocator from its spec and annotations.
func requestFor(svc *v1.Service) (ipam.Request, error) {
	req := ipam.Request{
		Service:    serviceKey(svc),
		Namespace:  svc.Namespace,
		Labels:     labels.Set(svc.Labels),
		Pool:       strings.TrimSpace(svc.Annotations[annotation.Pool]),
		SharingKey: strings.TrimSpace(svc.Annotations[annotation.AllowSharedIP]),
	}
	families, err := familiesOf(svc)
	if err != nil {
		return ipam.Request{}, err
	}
	req.Families = families
	if req.Addresses, err = requestedAddresses(svc, families); err != nil {
		return ipam.Request{}, err
	}
	for _, p := range svc.Spec.Ports {
		req.Ports = append(req.Ports, ipam.Port{Protocol: string(p.Protocol), Port: p.Port})
	}
	return req, nil
}

// familiesOf returns the families the Service's load balancer should have, in the order
// of spec.ipFamilies. The API server always fills ipFamilies; the fallback to IPv4 is for
// Services that reach us without it.
func familiesOf(svc *v1.Service) ([]iprange.Family, error) {
	if len(svc.Spec.IPFamilies) == 0 {
		return []iprange.Family{iprange.IPv4}, nil
	}
	var out []iprange.Family
	for i, f := range svc.Spec.IPFamilies {
		switch f {
		case v1.IPv4Protocol:
			out = append(out, iprange.IPv4)
		case v1.IPv6Protocol:
			out = append(out, iprange.IPv6)
		default:
			return nil, &FieldError{Field: fmt.Sprintf("spec.ipFamilies[%d]", i), Value: string(f), Reason: "not IPv4 or IPv6"}
		}
	}
	if svc.Spec.IPFamilyPolicy == nil || *svc.Spec.IPFamilyPolicy == v1.IPFamilyPolicySingleStack {
		out = out[:1]
	}
	return out, nil
}

// requestedAddresses reads lb.baremetal.io/ips and spec.loadBalancerIP, which must agree
// when both are set.
func requestedAddresses(svc *v1.Service, families []iprange.Family) ([]netip.Addr, error) {
	value, fromAnnotation := svc.Annotations[annotation.IPs]
	field := annotation.IPs
	if !fromAnnotation {
		value, field = svc.Spec.LoadBalancerIP, "spec.loadBalancerIP"
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var out []netip.Addr
	var seen [2]bool
	for _, s := range strings.Split(value, ",") {
		addr, err := netip.ParseAddr(strings.TrimSpace(s))
		switch {
		case err != nil:
			return nil, &FieldError{Field: field, Value: value, Reason: fmt.Sprintf("%q is not an IP address", strings.TrimSpace(s))}
		case addr.Zone() != "" || addr.Is4In6():
			return nil, &FieldError{Field: field, Value: value, Reason: fmt.Sprintf("%s cannot be a Service address", addr)}
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
				Reason: fmt.Sprintf("disagrees with %s=%q; set only one of them", annotation.IPs, value)}
		}
	}
	return out, nil
}
