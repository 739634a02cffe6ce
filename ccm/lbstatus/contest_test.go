package lbstatus

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// heldLB is a load balancer that holds one address for every Service.
type heldLB struct{ addr string }

func (h heldLB) status() *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: h.addr}}}
}
func (h heldLB) GetLoadBalancer(context.Context, string, *v1.Service) (*v1.LoadBalancerStatus, bool, error) {
	return h.status(), true, nil
}
func (h heldLB) GetLoadBalancerName(context.Context, string, *v1.Service) string { return "" }
func (h heldLB) EnsureLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) (*v1.LoadBalancerStatus, error) {
	return h.status(), nil
}
func (h heldLB) UpdateLoadBalancer(context.Context, string, *v1.Service, []*v1.Node) error {
	return nil
}
func (h heldLB) EnsureLoadBalancerDeleted(context.Context, string, *v1.Service) error { return nil }

// TestContestedStatus has a second writer put its own address back into the status each
// time the controller corrects it, for 10 minutes, with each status change checked
// after settle as the informer's handler does. The controller must back off and give
// up after a few rewrites with one StatusContested event, not write thousands of times.
func TestContestedStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse("test", []byte("pools:\n- name: p\n  addresses: [198.51.100.0/28]\n"))
		if err != nil {
			t.Fatal(err)
		}
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Finalizers: []string{finalizer}, Generation: 1},
			Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
			Status:     v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "198.51.100.9"}}}},
		}
		client := fake.NewClientset(svc)
		patches := 0
		client.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
			patches++
			return true, svc, nil // the other writer puts its address back at once
		})
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		if err := indexer.Add(svc); err != nil {
			t.Fatal(err)
		}
		recorder := record.NewFakeRecorder(10000)
		queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
		defer queue.ShutDown()
		c := &Controller{
			lb: heldLB{"198.51.100.2"}, alloc: fakeAllocator{cfg: cfg}, client: client, recorder: recorder,
			services: corelisters.NewServiceLister(indexer), queue: queue,
		}
		ctx := context.Background()
		for end := time.Now().Add(10 * time.Minute); time.Now().Before(end); {
			before := patches
			if err := c.sync(ctx, "ns/web"); err != nil {
				t.Fatal(err)
			}
			if patches > before {
				time.Sleep(settle) // the status changed back: the handler queues it after settle
				continue
			}
			time.Sleep(time.Second) // waiting, as the queue would: check again later
		}
		contested := 0
		for len(recorder.Events) > 0 {
			if e := <-recorder.Events; strings.Contains(e, "StatusContested") {
				contested++
				if !strings.Contains(e, "ns/web") || !strings.Contains(e, "198.51.100.9") {
					t.Errorf("event %q names neither the Service nor what the other writer set", e)
				}
			}
		}
		t.Logf("in 10 minutes of a contested status: %d status writes, %d StatusContested events", patches, contested)
		if patches > 10 || contested != 1 {
			t.Errorf("in 10 minutes of a contested status: %d status writes and %d StatusContested events, want at most 10 and 1", patches, contested)
		}
		// A change of the Service ends the contest: its status is corrected again at once.
		changed := svc.DeepCopy()
		changed.Generation = 2
		if err := indexer.Update(changed); err != nil {
			t.Fatal(err)
		}
		before := patches
		if err := c.sync(ctx, "ns/web"); err != nil || patches != before+1 {
			t.Errorf("after the Service changed: %d status writes, %v; want 1", patches-before, err)
		}
	})
}
