package annotation

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	svc.Annotations[Pool] = " edge "
	svc.Annotations[IPs] = "198.51.100.7, 2001:db8::7"
	svc.Annotations[AllowSharedIP] = "shared"
	svc.Spec.LoadBalancerIP = "198.51.100.7"
	r, err := Parse(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := ipam.Request{
		Service: "ns/web", Namespace: "ns", Labels: svc.Labels, Pool: "edge",
		Families:   []iprange.Family{iprange.IPv6, iprange.IPv4},
		Addresses:  []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")},
		SharingKey: "ns/shared", Ports: []ipam.Port{{Protocol: "TCP", Port: 80}},
	}
	if got := r.Allocation(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Allocation =\n%+v\nwant\n%+v", got, want)
	}
	if r.Group() != "shared/ns/shared" || !r.Ours() || r.Announced() {
		t.Errorf("group %q, ours %v, announced %v; want shared/ns/shared, ours, not announced (no address yet)", r.Group(), r.Ours(), r.Announced())
	}

	single := service("single", v1.IPFamilyPolicySingleStack, v1.IPv6Protocol)
	single.Spec.LoadBalancerIP = "2001:db8::9"
	r, err = Parse(single)
	if err != nil || !slices.Equal(r.Families, []iprange.Family{iprange.IPv6}) || !slices.Equal(r.Addresses, []netip.Addr{netip.MustParseAddr("2001:db8::9")}) {
		t.Errorf("single stack: %+v, %v", r, err)
	}
}

func TestRequestForErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1.Service)
		want   string
	}{{
		name:   "not an address",
		mutate: func(s *v1.Service) { s.Annotations[IPs] = "198.51.100.7,banana" },
		want:   `lb.baremetal.io/ips="198.51.100.7,banana": "banana" is not an IP address`,
	}, {
		name:   "empty entry",
		mutate: func(s *v1.Service) { s.Annotations[IPs] = "198.51.100.7," },
		want:   `lb.baremetal.io/ips="198.51.100.7,": "" is not an IP address`,
	}, {
		name:   "two of one family",
		mutate: func(s *v1.Service) { s.Annotations[IPs] = "198.51.100.7,198.51.100.8" },
		want:   `lb.baremetal.io/ips="198.51.100.7,198.51.100.8": more than one IPv4 address`,
	}, {
		name:   "family the Service lacks",
		mutate: func(s *v1.Service) { s.Annotations[IPs] = "2001:db8::1" },
		want:   `lb.baremetal.io/ips="2001:db8::1": 2001:db8::1 is IPv6, but the Service's ipFamilies are [IPv4]`,
	}, {
		name:   "zone",
		mutate: func(s *v1.Service) { s.Spec.LoadBalancerIP = "fe80::1%eth0" },
		want:   `spec.loadBalancerIP="fe80::1%eth0": fe80::1%eth0 has a zone: a Service address cannot`,
	}, {
		name: "annotation and loadBalancerIP disagree",
		mutate: func(s *v1.Service) {
			s.Annotations[IPs] = "198.51.100.7"
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
			_, err := Parse(svc)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %v is not a *FieldError", err)
			}
		})
	}
}
