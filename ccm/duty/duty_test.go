package duty

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

type fakeProber struct {
	mu        sync.Mutex
	v         probe.Verdict
	expedited [][]string
}

func (f *fakeProber) Expedite(nodes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expedited = append(f.expedited, nodes)
}

// lastExpedited returns the nodes of the last Expedite, or nil.
func (f *fakeProber) lastExpedited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.expedited) == 0 {
		return nil
	}
	return f.expedited[len(f.expedited)-1]
}

func (f *fakeProber) Verdict() probe.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v
}

func (f *fakeProber) set(seq uint64, down ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v = probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 1, Seq: seq}, Down: down}
}

func service(name, ip string, plan ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Annotations: map[string]string{annotation.Announcer: plan[0]}},
		Spec:   v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: ip}}}},
	}
	if len(plan) > 1 {
		svc.Annotations[annotation.Standbys] = plan[1]
	}
	return svc
}

// TestTrackerFollowsPlansAndVerdict checks that each node's duty is what the plans give
// it under the verdict, unknown before the first verdict, and new at once after a new one.
func TestTrackerFollowsPlansAndVerdict(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte("pools:\n- name: p\n  addresses: [198.51.100.0/24]\n"))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(service("a", "198.51.100.1", "n1", "n2"), service("b", "198.51.100.2", "n2", "n1"), service("out", "203.0.113.1", "n1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	prober := &fakeProber{}
	tr := New(cfg, factory.Core().V1().Services(), factory.Core().V1().Nodes(), prober)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go tr.Run(ctx)

	want := func(what string, node string, addrs ...string) {
		t.Helper()
		var w []netip.Addr
		for _, a := range addrs {
			w = append(w, netip.MustParseAddr(a))
		}
		var got []netip.Addr
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			var known bool
			var digest probe.Digest
			got, digest, known = tr.List(node)
			d, _ := tr.Duty(node)
			return known && slices.Equal(got, w) && digest == probe.DigestOf(w) && d == digest, nil
		})
		if err != nil {
			t.Fatalf("%s: duty of %s is %v, want %v", what, node, got, w)
		}
	}
	// Computed, but not known: without a verdict, the ccm cannot say who is down.
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		addrs, _, _ := tr.List("n1")
		return len(addrs) == 1, nil
	})
	if _, known := tr.Duty("n1"); err != nil || known {
		t.Fatalf("before the first verdict: computed %v, known %v; want computed and not known", err == nil, known)
	}
	prober.set(1)
	want("first verdict", "n1", "198.51.100.1")
	want("first verdict", "n2", "198.51.100.2")
	if got := prober.lastExpedited(); got != nil {
		t.Errorf("Expedite(%v) at the first duties known, want none: every agent learns them in its slot", got)
	}
	prober.set(2, "n2")
	want("n2 down", "n1", "198.51.100.1", "198.51.100.2")
	want("n2 down", "n2")
	if got := prober.lastExpedited(); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("Expedite(%v) after n2 went down, want [n1 n2]: both duties changed", got)
	}
	moved := service("a", "198.51.100.1", "n2", "n1")
	moved.ResourceVersion = "2"
	if _, err := client.CoreV1().Services("ns").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prober.set(3)
	want("a moved", "n2", "198.51.100.1", "198.51.100.2")
	want("a moved", "n1")
}

// TestTrackerPlanned checks that the nodes some plan names, as announcer or standby, are
// published, with a new version only when they change, whatever the verdict.
func TestTrackerPlanned(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte("pools:\n- name: p\n  addresses: [198.51.100.0/24]\n"))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(service("a", "198.51.100.1", "n1", "n2,n3"), service("b", "198.51.100.2", "n2"))
	factory := informers.NewSharedInformerFactory(client, 0)
	tr := New(cfg, factory.Core().V1().Services(), factory.Core().V1().Nodes(), &fakeProber{})
	if p := tr.Planned(); !p.Named("n9") {
		t.Error("before the caches synced, a node counts as named in no plan")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go tr.Run(ctx)
	var p *prober.Planned
	wait := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			p = tr.Planned()
			if p != nil && len(p.Nodes) == len(want) && !slices.ContainsFunc(want, func(n string) bool { return !p.Named(n) }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: planned %+v, want %v", what, p, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("at the start", "n1", "n2", "n3")
	first := p.Version
	if p.Named("n4") {
		t.Error("n4, in no plan, counts as named")
	}
	// A change of what the plans do not hold: the same set, the same version.
	other := service("b", "198.51.100.2", "n2")
	other.ResourceVersion, other.Labels = "2", map[string]string{"x": "y"}
	if _, err := client.CoreV1().Services("ns").Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := service("a", "198.51.100.1", "n4")
	moved.ResourceVersion = "3"
	if _, err := client.CoreV1().Services("ns").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("a moved to n4", "n2", "n4")
	if p.Version != first+1 {
		t.Errorf("version %d after one change of the set from %d, want %d", p.Version, first, first+1)
	}
}
