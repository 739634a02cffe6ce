package announcer

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// ns is the namespace of every test object.
const ns = "ns"

// defaultConfig has one pool without a nodeSelector, holding every test address, so that
// only health, labels and endpoints decide.
const defaultConfig = `pools:
- name: default
  addresses:
  - 198.51.100.0/24
  - "2001:db8::/64"
`

var _ Health = (*fakeHealth)(nil)

// fakeHealth is a Health whose states the test sets. Nodes it was told nothing about are
// Up, as after a healthy start.
type fakeHealth struct {
	mu        sync.Mutex
	states    map[string]liveness.State
	listeners []func(string)
	replaced  map[string]uint64 // as the announcer last set them
	unable    map[string][]probe.Unable
}

func (h *fakeHealth) Unable(node string) []probe.Unable {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unable[node]
}

// setUnable changes what a node's agent cannot announce and tells the listeners.
func (h *fakeHealth) setUnable(node string, u ...probe.Unable) {
	h.mu.Lock()
	if h.unable == nil {
		h.unable = map[string][]probe.Unable{}
	}
	h.unable[node] = u
	listeners := append([]func(string){}, h.listeners...)
	h.mu.Unlock()
	for _, f := range listeners {
		f(node)
	}
}

func (h *fakeHealth) Health(node string) liveness.State {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.states[node]; ok {
		return s
	}
	return liveness.Up
}

func (h *fakeHealth) OnChange(f func(string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listeners = append(h.listeners, f)
}

func (h *fakeHealth) HasSynced() bool { return true }

func (h *fakeHealth) SetReplaced(nodes map[string]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.replaced = nodes
}

// replacedNodes returns the nodes the announcer last held as replaced.
func (h *fakeHealth) replacedNodes() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.replaced
}

// set changes a node's state and tells the listeners, as the prober does.
func (h *fakeHealth) set(node string, s liveness.State) {
	h.mu.Lock()
	if h.states == nil {
		h.states = map[string]liveness.State{}
	}
	h.states[node] = s
	listeners := append([]func(string){}, h.listeners...)
	h.mu.Unlock()
	for _, f := range listeners {
		f(node)
	}
}

// testController is a Controller over a fake clientset, with its fakes at hand.
type testController struct {
	*Controller
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	health   *fakeHealth
	recorder *record.FakeRecorder
}

// newTestController returns a controller over a fake clientset holding objs, under
// defaultConfig, with its informers started and synced. Nothing runs its queue: tests
// call sync themselves, so each decision happens where the test says.
func newTestController(t testing.TB, objs ...runtime.Object) *testController {
	t.Helper()
	return newTestControllerWithConfig(t, defaultConfig, objs...)
}

func newTestControllerWithConfig(t testing.TB, yaml string, objs ...runtime.Object) *testController {
	t.Helper()
	cfg, err := config.Parse("test", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	health := &fakeHealth{}
	// Room for every event a test makes: FakeRecorder blocks when its channel is full.
	recorder := record.NewFakeRecorder(1000)
	c := New(cfg, factory, client, recorder, health)
	t.Cleanup(c.queue.ShutDown)
	factory.Start(t.Context().Done())
	for typ, ok := range factory.WaitForCacheSync(t.Context().Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	return &testController{Controller: c, client: client, factory: factory, health: health, recorder: recorder}
}

// syncKey decides one group, as a worker would.
func (tc *testController) syncKey(t *testing.T, key string) {
	t.Helper()
	if err := tc.sync(t.Context(), key); err != nil {
		t.Fatalf("sync %s: %v", key, err)
	}
}

// poll waits for cond, which reads the caches that the fake watch fills.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// service returns the Service as the API has it now.
func (tc *testController) service(t *testing.T, name string) *v1.Service {
	t.Helper()
	svc, err := tc.client.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// announcer returns the announcer annotation of the Service as the API has it.
func (tc *testController) announcer(t *testing.T, name string) string {
	t.Helper()
	return tc.service(t, name).Annotations[annotation.Announcer]
}

// settle waits until the informer's copy of the Service is the API's, as after the patches
// of a sync reached the cache through the watch: the next sync must see them.
func (tc *testController) settle(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		want := tc.service(t, name)
		poll(t, "the cache to see Service "+name, func() bool {
			got, err := tc.services.Services(ns).Get(name)
			return err == nil && apiequality.Semantic.DeepEqual(got.Annotations, want.Annotations) &&
				apiequality.Semantic.DeepEqual(got.Status, want.Status) && apiequality.Semantic.DeepEqual(got.Spec, want.Spec)
		})
	}
}

// updateService changes a Service in the API, and waits for the cache to see it.
func (tc *testController) updateService(t *testing.T, name string, change func(*v1.Service)) {
	t.Helper()
	svc := tc.service(t, name)
	change(svc)
	// The fake clientset's Update writes the status too, which is what the allocator's
	// status update would do.
	if _, err := tc.client.CoreV1().Services(ns).Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.settle(t, name)
}

// deleteService deletes a Service and waits for the cache to lose it.
func (tc *testController) deleteService(t *testing.T, name string) {
	t.Helper()
	if err := tc.client.CoreV1().Services(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the cache to lose Service "+name, func() bool {
		_, err := tc.services.Services(ns).Get(name)
		return apierrors.IsNotFound(err)
	})
}

// setEndpoints replaces the endpoints of an EndpointSlice and waits for the cache.
func (tc *testController) setEndpoints(t *testing.T, slice string, eps ...discoveryv1.Endpoint) {
	t.Helper()
	s, err := tc.client.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), slice, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints = eps
	if _, err := tc.client.DiscoveryV1().EndpointSlices(ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the cache to see EndpointSlice "+slice, func() bool {
		got, err := tc.factory.Discovery().V1().EndpointSlices().Lister().EndpointSlices(ns).Get(slice)
		return err == nil && apiequality.Semantic.DeepEqual(got.Endpoints, s.Endpoints)
	})
}

// writes counts the requests that changed something: the announcer's patches.
func (tc *testController) writes() int {
	n := 0
	for _, a := range tc.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			n++
		}
	}
	return n
}

// events returns the events recorded since the last call, as "Type Reason message".
func (tc *testController) events() []string {
	var out []string
	for {
		select {
		case e := <-tc.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// lbService is a Service of type LoadBalancer in ns holding ips in its status.
func lbService(name string, ips ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// announcedBy sets the announcer annotation, as a previous decision left it.
func announcedBy(svc *v1.Service, node string) *v1.Service {
	svc.Annotations[annotation.Announcer] = node
	return svc
}

// local makes a Service's externalTrafficPolicy Local.
func local(svc *v1.Service) *v1.Service {
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	return svc
}

func node(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// endpointSlice is a slice of Service service's endpoints.
func endpointSlice(service, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}
}

func endpoint(node *string, ready, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{"10.244.0.1"},
		NodeName:   node,
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating},
	}
}

// readyOn is a ready endpoint on node.
func readyOn(node string) discoveryv1.Endpoint { return endpoint(ptr.To(node), ptr.To(true), nil) }

// endpointsOn is n ready endpoints on node.
func endpointsOn(node string, n int) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, n)
	for i := range out {
		out[i] = readyOn(node)
	}
	return out
}

// gauge reads baremetal_ccm_announced_services{node}, or for node ""
// baremetal_ccm_services_without_announcer. The gauges are the package's, shared by every
// test, so tests compare them with what they were before they started.
func gauge(t *testing.T, node string) float64 {
	t.Helper()
	var m metrics.GaugeMetric = servicesWithoutAnnouncer
	if node != "" {
		m = servicesPerAnnouncer.WithLabelValues(node)
	}
	v, err := testutil.GetGaugeMetricValue(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gauges reads the gauges of nodes, and under "" the one of Services without announcer.
func gauges(t *testing.T, nodes ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{"": gauge(t, "")}
	for _, n := range nodes {
		out[n] = gauge(t, n)
	}
	return out
}

// gaugeDelta returns how the gauges read by gauges moved since before, leaving out those
// that did not.
func gaugeDelta(t *testing.T, before map[string]float64) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range before {
		if d := gauge(t, k) - v; d != 0 {
			out[k] = d
		}
	}
	return out
}
