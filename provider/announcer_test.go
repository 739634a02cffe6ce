package provider

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

func endpoint(node *string, ready, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{"10.244.0.1"},
		NodeName:   node,
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating},
	}
}

// newTestAnnouncer returns a controller over a fake clientset holding objs, with its
// caches filled.
func newTestAnnouncer(t *testing.T, objs ...runtime.Object) (*announcerController, *fake.Clientset) {
	t.Helper()
	cfg, err := config.Parse("test", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := newAnnouncerController(cfg, factory)
	c.client = client
	c.recorder = record.NewFakeRecorder(100)
	c.health = allUp{}
	factory.Start(t.Context().Done())
	factory.WaitForCacheSync(t.Context().Done())
	return c, client
}

func TestGroupCountsOnlyReadyEndpointsWithANode(t *testing.T) {
	svc := withStatus(service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), metav1.Now().Time, "198.51.100.1")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			endpoint(ptr.To("a"), ptr.To(true), nil),
			endpoint(ptr.To("a"), nil, nil),                   // unknown readiness counts as ready
			endpoint(ptr.To("b"), ptr.To(false), nil),         // not ready
			endpoint(ptr.To("b"), ptr.To(true), ptr.To(true)), // terminating
			endpoint(nil, ptr.To(true), nil),                  // no node
		},
	}
	other := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "other-1", Labels: map[string]string{discoveryv1.LabelServiceName: "other"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint(ptr.To("c"), ptr.To(true), nil)},
	}
	c, _ := newTestAnnouncer(t, svc, slice, other)
	g, err := c.group([]*v1.Service{svc})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Endpoints) != 1 || g.Endpoints["a"] != 2 {
		t.Errorf("endpoints = %v, want map[a:2]", g.Endpoints)
	}
	if g.FirstIP != "198.51.100.1" {
		t.Errorf("first IP = %s", g.FirstIP)
	}
}

// TestSyncWritesOnlyChanges checks that a sync with nothing changed writes nothing, and
// that a change is one patch per Service.
func TestSyncWritesOnlyChanges(t *testing.T) {
	svc := withStatus(service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), metav1.Now().Time, "198.51.100.1")
	svc.Spec.Type = v1.ServiceTypeLoadBalancer
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	c, client := newTestAnnouncer(t, svc, node)
	ctx := context.Background()
	key := groupKey(svc)

	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	writes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
				n++
			}
		}
		return n
	}
	if w := writes(); w != 1 {
		t.Fatalf("first sync made %d writes, want 1 patch: %v", w, client.Actions())
	}
	got, err := client.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || got.Annotations[annotation.Announcer] != "a" {
		t.Fatalf("announcer = %q, %v; want a", got.Annotations[annotation.Announcer], err)
	}
	// The cache catches up with the patch; syncing again writes nothing.
	if err := c.serviceIndexer.Update(got); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if w := writes(); w != 1 {
		t.Errorf("a sync with nothing changed wrote: %v", client.Actions())
	}
}

// TestDualStackHasOneAnnouncer checks that both addresses of a dual-stack Service go to one
// node, decided on the lowest address.
func TestDualStackHasOneAnnouncer(t *testing.T) {
	svc := withStatus(service("dual", v1.IPFamilyPolicyRequireDualStack, v1.IPv6Protocol, v1.IPv4Protocol), metav1.Now().Time, "2001:db8::1", "198.51.100.1")
	c, client := newTestAnnouncer(t, svc, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	g, err := c.group([]*v1.Service{svc})
	if err != nil {
		t.Fatal(err)
	}
	if g.FirstIP != "198.51.100.1" {
		t.Errorf("first IP = %s, want the lowest address 198.51.100.1", g.FirstIP)
	}
	if err := c.sync(context.Background(), groupKey(svc)); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Services("ns").Get(context.Background(), "dual", metav1.GetOptions{})
	if err != nil || got.Annotations[annotation.Announcer] == "" {
		t.Fatalf("announcer = %q, %v", got.Annotations[annotation.Announcer], err)
	}
}

// allUp is a HealthSource for which every agent answers.
type allUp struct{}

func (allUp) Health(string) AgentState { return AgentUp }
func (allUp) OnChange(func(string))    {}
func (allUp) HasSynced() bool          { return true }
