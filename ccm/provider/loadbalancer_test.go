package provider

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

const testConfig = `
pools:
- name: default
  addresses: [198.51.100.0/30, 2001:db8::/126]
- name: v4only
  addresses: [203.0.113.0/30]
  autoAssign: false
`

// newTestLB returns a provider over a Service cache holding existing, and its events.
func newTestLB(t testing.TB, existing ...*v1.Service) (*loadBalancer, *record.FakeRecorder) {
	t.Helper()
	cfg, err := config.Parse("test", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	lb := New(cfg).lb
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, svc := range existing {
		if err := indexer.Add(svc); err != nil {
			t.Fatal(err)
		}
	}
	lb.services = corelisters.NewServiceLister(indexer)
	lb.servicesSynced = func() bool { return true }
	recorder := record.NewFakeRecorder(100)
	lb.recorder = recorder
	return lb, recorder
}

func withStatus(svc *v1.Service, created time.Time, ips ...string) *v1.Service {
	svc.CreationTimestamp = metav1.NewTime(created)
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func ingressIPs(st *v1.LoadBalancerStatus) string {
	var s []string
	for _, ing := range st.Ingress {
		if ing.IPMode == nil || *ing.IPMode != v1.LoadBalancerIPModeVIP {
			return "ipMode not VIP"
		}
		s = append(s, ing.IP)
	}
	return strings.Join(s, ",")
}

func events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestWaitsForCacheSync(t *testing.T) {
	lb, _ := newTestLB(t)
	lb.servicesSynced = func() bool { return false }
	_, err := lb.EnsureLoadBalancer(context.Background(), "c", service("a", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), nil)
	var retry *api.RetryError
	if !errors.As(err, &retry) {
		t.Fatalf("got %v, want a RetryError until the cache has synced", err)
	}
}

func TestEnsureAssignsAndIsIdempotent(t *testing.T) {
	lb, rec := newTestLB(t)
	ctx := context.Background()
	svc := service("a", v1.IPFamilyPolicyRequireDualStack, v1.IPv4Protocol, v1.IPv6Protocol)
	st, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ingressIPs(st); got != "198.51.100.0,2001:db8::" {
		t.Fatalf("status = %s", got)
	}
	if got := events(rec); len(got) != 1 || got[0] != "Normal AddressAssigned Assigned 198.51.100.0 (pool default), 2001:db8:: (pool default)" {
		t.Errorf("events = %q", got)
	}
	// The service controller writes the status; the next call sees it and records nothing.
	svc.Status.LoadBalancer = *st
	st2, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil)
	if err != nil || ingressIPs(st2) != ingressIPs(st) {
		t.Fatalf("second Ensure = %v, %v", st2, err)
	}
	if got := events(rec); len(got) != 0 {
		t.Errorf("second Ensure recorded %q", got)
	}
	if _, exists, _ := lb.GetLoadBalancer(ctx, "c", svc); !exists {
		t.Error("GetLoadBalancer: not found")
	}
	if err := lb.EnsureLoadBalancerDeleted(ctx, "c", svc); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := lb.GetLoadBalancer(ctx, "c", svc); exists {
		t.Error("GetLoadBalancer: still exists after delete")
	}
	if got := events(rec); len(got) != 1 || got[0] != "Normal AddressReleased Released 198.51.100.0 (pool default), 2001:db8:: (pool default)" {
		t.Errorf("events = %q", got)
	}
}

func TestPreferDualStackFallsBackToOneFamily(t *testing.T) {
	lb, _ := newTestLB(t)
	svc := service("a", v1.IPFamilyPolicyPreferDualStack, v1.IPv4Protocol, v1.IPv6Protocol)
	svc.Annotations[annotation.Pool] = "v4only"
	st, err := lb.EnsureLoadBalancer(context.Background(), "c", svc, nil)
	if err != nil || ingressIPs(st) != "203.0.113.0" {
		t.Fatalf("Ensure = %v, %v; want 203.0.113.0 alone", st, err)
	}
	svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	if _, err := lb.EnsureLoadBalancer(context.Background(), "c", svc, nil); err == nil {
		t.Fatal("RequireDualStack from an IPv4-only pool succeeded")
	}
}

func TestRefusalKeepsAddressAndSaysWhy(t *testing.T) {
	now := time.Now()
	holder := withStatus(service("holder", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "198.51.100.1")
	lb, rec := newTestLB(t, holder)
	ctx := context.Background()
	svc := service("mover", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	st, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil)
	if err != nil || ingressIPs(st) != "198.51.100.0" {
		t.Fatalf("Ensure = %v, %v", st, err)
	}
	svc.Status.LoadBalancer = *st
	events(rec)

	svc.Annotations[annotation.IPs] = "198.51.100.1"
	if _, err := lb.EnsureLoadBalancer(ctx, "c", svc, nil); err == nil {
		t.Fatal("took an address another Service holds")
	}
	want := "Warning AddressInUse address 198.51.100.1 is already assigned to ns/holder; ask for another address, or give the Services the same lb.baremetal.io/allow-shared-ip key and different ports to share it; the Service keeps 198.51.100.0"
	if got := events(rec); len(got) != 1 || got[0] != want {
		t.Errorf("events = %q\nwant %q", got, want)
	}
	if got := lb.alloc.Addresses("ns/mover"); len(got) != 1 || got[0].String() != "198.51.100.0" {
		t.Errorf("mover holds %v after the refusal", got)
	}
}

func TestRestoreReportsConflicts(t *testing.T) {
	now := time.Now()
	older := withStatus(service("older", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "198.51.100.2")
	newer := withStatus(service("newer", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now.Add(time.Second), "198.51.100.2")
	gone := withStatus(service("gone", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "192.0.2.1")
	lb, rec := newTestLB(t, newer, older, gone)
	st, err := lb.EnsureLoadBalancer(context.Background(), "c", newer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ingressIPs(st) == "198.51.100.2" {
		t.Fatal("the newer Service kept the address the older one holds")
	}
	got := strings.Join(events(rec), "\n")
	for _, want := range []string{
		"Warning AddressConflict Address 198.51.100.2 is also in the status of ns/older, which had it first; this Service gets another address",
		"Warning AddressNotInPool Address 192.0.2.1 is in no pool of the cloud-config any more; this Service gets another address",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("events lack %q:\n%s", want, got)
		}
	}
}

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

// TestRestoreKeepsSharingOfABadRequest checks that a Service whose annotations went bad
// still shares its address at a restart: losing its key would push its partner to a new
// address.
func TestRestoreKeepsSharingOfABadRequest(t *testing.T) {
	now := time.Now()
	good := withStatus(service("good", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "198.51.100.1")
	good.Annotations[annotation.AllowSharedIP] = "web"
	bad := withStatus(service("bad", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now.Add(-time.Second), "198.51.100.1")
	bad.Annotations[annotation.AllowSharedIP] = "web"
	bad.Annotations[annotation.IPs] = "not an address"
	bad.Spec.Ports[0].Port = 443
	lb, rec := newTestLB(t, good, bad)
	st, err := lb.EnsureLoadBalancer(context.Background(), "c", good, nil)
	if err != nil || ingressIPs(st) != "198.51.100.1" {
		t.Fatalf("Ensure of the partner = %v, %v; want it to keep 198.51.100.1", st, err)
	}
	if got := lb.alloc.Holders(netip.MustParseAddr("198.51.100.1")); len(got) != 2 {
		t.Errorf("holders of the shared address %v, want both Services", got)
	}
	for _, e := range events(rec) {
		if strings.Contains(e, "AddressConflict") {
			t.Errorf("event %q: the restore took the bad request for another holder", e)
		}
	}
}
