package provider

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

func service(name string, policy v1.IPFamilyPolicy, families ...v1.IPFamily) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{}},
		Spec: v1.ServiceSpec{
			Type:           v1.ServiceTypeLoadBalancer,
			IPFamilyPolicy: &policy,
			IPFamilies:     families,
			Ports:          []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
}

func TestRequestFor(t *testing.T) {
	svc := service("web", v1.IPFamilyPolicyRequireDualStack, v1.IPv6Protocol, v1.IPv4Protocol)
	svc.Labels = map[string]string{"tier": "public"}
	svc.Annotations[annotation.Pool] = " edge "
	svc.Annotations[annotation.IPs] = "198.51.100.7, 2001:db8::7"
	svc.Annotations[annotation.AllowSharedIP] = "shared"
	svc.Spec.LoadBalancerIP = "198.51.100.7"
	req, err := requestFor(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := ipam.Request{
		Service: "ns/web", Namespace: "ns", Labels: svc.Labels, Pool: "edge",
		Families:   []iprange.Family{iprange.IPv6, iprange.IPv4},
		Addresses:  []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")},
		SharingKey: "shared", Ports: []ipam.Port{{Protocol: "TCP", Port: 80}},
	}
	if fmt.Sprint(req) != fmt.Sprint(want) {
		t.Errorf("requestFor =\n%+v\nwant\n%+v", req, want)
	}

	single := service("single", v1.IPFamilyPolicySingleStack, v1.IPv6Protocol)
	single.Spec.LoadBalancerIP = "2001:db8::9"
	req, err = requestFor(single)
	if err != nil || !slices.Equal(req.Families, []iprange.Family{iprange.IPv6}) || !slices.Equal(req.Addresses, []netip.Addr{netip.MustParseAddr("2001:db8::9")}) {
		t.Errorf("single stack: %+v, %v", req, err)
	}
}

func TestRequestForErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1.Service)
		want   string
	}{{
		name:   "not an address",
		mutate: func(s *v1.Service) { s.Annotations[annotation.IPs] = "198.51.100.7,banana" },
		want:   `lb.baremetal.io/ips="198.51.100.7,banana": "banana" is not an IP address`,
	}, {
		name:   "empty entry",
		mutate: func(s *v1.Service) { s.Annotations[annotation.IPs] = "198.51.100.7," },
		want:   `lb.baremetal.io/ips="198.51.100.7,": "" is not an IP address`,
	}, {
		name:   "two of one family",
		mutate: func(s *v1.Service) { s.Annotations[annotation.IPs] = "198.51.100.7,198.51.100.8" },
		want:   `lb.baremetal.io/ips="198.51.100.7,198.51.100.8": more than one IPv4 address`,
	}, {
		name:   "family the Service lacks",
		mutate: func(s *v1.Service) { s.Annotations[annotation.IPs] = "2001:db8::1" },
		want:   `lb.baremetal.io/ips="2001:db8::1": 2001:db8::1 is IPv6, but the Service's ipFamilies are [IPv4]`,
	}, {
		name:   "zone",
		mutate: func(s *v1.Service) { s.Spec.LoadBalancerIP = "fe80::1%eth0" },
		want:   `spec.loadBalancerIP="fe80::1%eth0": fe80::1%eth0 cannot be a Service address`,
	}, {
		name: "annotation and loadBalancerIP disagree",
		mutate: func(s *v1.Service) {
			s.Annotations[annotation.IPs] = "198.51.100.7"
			s.Spec.LoadBalancerIP = "198.51.100.8"
		},
		want: `spec.loadBalancerIP="198.51.100.8": disagrees with lb.baremetal.io/ips="198.51.100.7"; set only one of them`,
	}, {
		name:   "unknown family",
		mutate: func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{"IPv5"} },
		want:   `spec.ipFamilies[0]="IPv5": not IPv4 or IPv6`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := service("x", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
			tc.mutate(svc)
			_, err := requestFor(svc)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			if refusalReason(err) != ReasonInvalidRequest {
				t.Errorf("reason = %s, want %s", refusalReason(err), ReasonInvalidRequest)
			}
		})
	}
}
