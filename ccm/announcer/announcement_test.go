package announcer

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// announced collects what the announcer tells its listeners.
type announced struct {
	mu       sync.Mutex
	services []string
}

func (a *announced) add(services []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.services = append(a.services, services...)
}

// take returns the Services told of since the last call, sorted and each once.
func (a *announced) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Compact(slices.Sorted(slices.Values(a.services)))
	a.services = nil
	return out
}

// TestAnnouncements walks a group through the states its Services' conditions tell, and
// checks that the listeners hear of a Service when, and only when, what it is told
// changes.
func TestAnnouncements(t *testing.T) {
	tc := newTestController(t, local(lbService("web", "198.51.100.1")), lbService("db", "198.51.100.2"),
		endpointSlice("web", "web-1", readyOn("node-a")), node("node-a", nil), node("node-b", nil))
	var heard announced
	tc.OnAnnouncement(heard.add)
	key := "address/198.51.100.1"
	if _, ok := tc.Announcement("ns/web"); ok {
		t.Fatal("an announcement before any decision")
	}

	step := func(name string, wantHeard []string, check func(a Announcement)) {
		t.Helper()
		tc.syncKey(t, key)
		tc.settle(t, "web")
		if got := heard.take(); !slices.Equal(got, wantHeard) {
			t.Errorf("%s: listeners heard of %v, want %v", name, got, wantHeard)
		}
		a, ok := tc.Announcement("ns/web")
		if !ok {
			t.Fatalf("%s: no announcement for ns/web", name)
		}
		check(a)
	}

	step("decided", []string{"ns/web"}, func(a Announcement) {
		if a.Node != "node-a" || a.Reason != pick.ReasonEndpoints || a.Unannounced != "" || a.Isolated {
			t.Errorf("decided: %+v, want node-a for its ready endpoints", a)
		}
	})
	step("decided again", nil, func(Announcement) {})

	tc.isolationChanged(prober.Isolation{Isolated: true, Lost: []string{"node-a", "node-b"}, Probed: 2, Since: time.Now()})
	if got := heard.take(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("isolation: listeners heard of %v, want ns/web", got)
	}
	if a, _ := tc.Announcement("ns/web"); !a.Isolated || a.Node != "node-a" {
		t.Errorf("isolated: %+v, want node-a kept, isolated", a)
	}
	tc.isolationChanged(prober.Isolation{Probed: 2})
	if got := heard.take(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("isolation over: listeners heard of %v, want ns/web", got)
	}
	if a, _ := tc.Announcement("ns/web"); a.Isolated {
		t.Errorf("isolation over: %+v, still isolated", a)
	}

	tc.health.set("node-a", liveness.Down)
	step("no node with an endpoint", []string{"ns/web"}, func(a Announcement) {
		if a.Node != "" || a.Reason != pick.ReasonNoLocalEndpoints || !strings.Contains(a.Told, "externalTrafficPolicy is Local") || a.OnlyUnable {
			t.Errorf("no node with an endpoint: %+v", a)
		}
	})
	tc.health.set("node-b", liveness.Down)
	step("no node up", []string{"ns/web"}, func(a Announcement) {
		if a.Node != "" || a.Reason != pick.ReasonNoEligibleNode || !strings.Contains(a.Told, "node-b agent not answering") || a.OnlyUnable {
			t.Errorf("no node up: %+v", a)
		}
	})
	told, _ := tc.Announcement("ns/web")
	// The nodes change again under the same reason: the event is not told again, and
	// neither is the Service.
	tc.health.set("node-b", liveness.Draining)
	step("same reason", nil, func(a Announcement) {
		if a.Told != told.Told {
			t.Errorf("same reason: told %q, want %q as the event said it", a.Told, told.Told)
		}
	})

	// node-a up again, but the pool's interface down there, and node-b still draining: no
	// node may announce, for want of links.
	tc.health.set("node-a", liveness.Up)
	tc.health.setUnable("node-a", probe.Unable{Pool: "default", Family: iprange.IPv4, Reason: probe.NoUpInterface})
	step("no interface", []string{"ns/web"}, func(a Announcement) {
		// The reason is the same, but not what keeps the nodes out: the Service is told
		// the new sentence.
		if a.Node != "" || a.Reason != pick.ReasonNoEligibleNode || !a.OnlyUnable || !strings.Contains(a.Told, "node-a has no up interface for pool default") {
			t.Errorf("no interface: %+v, want nobody, for the links", a)
		}
	})

	// The address leaves the Service: it is in no group, and told so.
	tc.updateService(t, "web", func(svc *v1.Service) { svc.Status = v1.ServiceStatus{} })
	tc.syncKey(t, key)
	if got := heard.take(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("address gone: listeners heard of %v, want ns/web", got)
	}
	if a, ok := tc.Announcement("ns/web"); ok {
		t.Errorf("address gone: still announced %+v", a)
	}
	if _, ok := tc.Announcement("ns/db"); ok {
		t.Error("ns/db, never decided, has an announcement")
	}
}

// TestConditionsOnlyDecideNothing checks that a write of a Service's conditions, the
// announcer's own output, queues no decision, while any other change does.
func TestConditionsOnlyDecideNothing(t *testing.T) {
	old := lbService("web", "198.51.100.1")
	old.ResourceVersion = "1"
	conds := old.DeepCopy()
	conds.ResourceVersion = "2"
	conds.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "baremetal-lb-conditions"}}
	conds.Status.Conditions = []metav1.Condition{{Type: "LoadBalancerServing", Status: metav1.ConditionTrue, Reason: "Serving"}}
	moved := conds.DeepCopy()
	moved.Status.LoadBalancer.Ingress[0].IP = "198.51.100.2"
	for _, tc := range []struct {
		name     string
		old, cur *v1.Service
		want     bool
	}{
		{"conditions written", old, conds, true},
		{"resync", conds, conds, false},
		{"conditions and ingress", old, moved, false},
		{"ingress alone", conds, moved, false},
	} {
		if got := conditionsOnly(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: conditionsOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
	if old.ResourceVersion != "1" || old.Status.Conditions != nil {
		t.Error("conditionsOnly changed the object it was given")
	}
}
