package announcer

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// TestNoAnnouncerWarnsOnce checks that a group nobody may announce gets one NoAnnouncer
// warning per reason: every node event syncs every group again, and a warning on each
// would bury the one that says something new.
func TestNoAnnouncerWarnsOnce(t *testing.T) {
	tc := newTestController(t, local(lbService("web", "198.51.100.1")), node("node-a", nil), node("node-b", nil))
	tc.health.set("node-a", liveness.Down)
	tc.health.set("node-b", liveness.Down)
	key := "address/198.51.100.1"

	for _, step := range []struct {
		name   string
		before func()
		// warn is the reason expected in a new warning, "" for none.
		warn pick.Reason
	}{
		{name: "first decision", warn: pick.ReasonNoEligibleNode},
		{name: "same reason"},
		{name: "same reason, another sentence", before: func() { tc.health.set("node-b", liveness.Draining) }},
		// Agents answer again, but the Local Service has no endpoint anywhere.
		{name: "reason changes", before: func() {
			tc.health.set("node-a", liveness.Up)
			tc.health.set("node-b", liveness.Up)
		}, warn: pick.ReasonNoLocalEndpoints},
		{name: "new reason again"},
		{name: "back to the first reason", before: func() { tc.health.set("node-a", liveness.Down); tc.health.set("node-b", liveness.Down) }, warn: pick.ReasonNoEligibleNode},
	} {
		if step.before != nil {
			step.before()
		}
		tc.syncKey(t, key)
		ev := tc.events()
		if step.warn == "" {
			if len(ev) != 0 {
				t.Errorf("%s: events = %q, want none", step.name, ev)
			}
			continue
		}
		if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+ReasonNoAnnouncer+" ") {
			t.Errorf("%s: events = %q, want one %s warning", step.name, ev, ReasonNoAnnouncer)
		}
		if got := tc.Snapshot().Decisions["ns/web"].Reason; got != string(step.warn) {
			t.Errorf("%s: reason = %q, want %s", step.name, got, step.warn)
		}
	}
	// Nothing was ever announced, so nothing was written.
	if w := tc.writes(); w != 0 {
		t.Errorf("writes: %v", tc.client.Actions())
	}
}

// TestGaugesFollowDecisions checks baremetal_ccm_announced_services and
// baremetal_ccm_services_without_announcer through a group's life: they must count each
// Service once, where its address is now, and forget it when it has no address any more.
func TestGaugesFollowDecisions(t *testing.T) {
	for _, end := range []struct {
		name string
		do   func(t *testing.T, tc *testController)
	}{
		{name: "status cleared", do: func(t *testing.T, tc *testController) {
			tc.updateService(t, "web", func(svc *v1.Service) { svc.Status = v1.ServiceStatus{} })
		}},
		{name: "deleted", do: func(t *testing.T, tc *testController) { tc.deleteService(t, "web") }},
	} {
		t.Run(end.name, func(t *testing.T) {
			tc := newTestController(t, lbService("web", "198.51.100.1"),
				endpointSlice("web", "web-1", append(endpointsOn("node-a", 2), endpointsOn("node-b", 1)...)...),
				node("node-a", nil), node("node-b", nil))
			before := gauges(t, "node-a", "node-b")
			key := "address/198.51.100.1"
			step := func(name string, want map[string]float64) {
				t.Helper()
				tc.syncKey(t, key)
				if d := gaugeDelta(t, before); !maps.Equal(d, want) {
					t.Errorf("%s: gauges moved by %v, want %v", name, d, want)
				}
				tc.settle(t, "web")
			}

			step("decided", map[string]float64{"node-a": 1})
			step("synced again", map[string]float64{"node-a": 1})
			tc.health.set("node-a", liveness.Down)
			step("moved", map[string]float64{"node-b": 1})
			tc.health.set("node-b", liveness.Down)
			step("no announcer", map[string]float64{"": 1})
			tc.health.set("node-a", liveness.Up)
			step("announced again", map[string]float64{"node-a": 1})

			end.do(t, tc)
			tc.syncKey(t, key)
			if d := gaugeDelta(t, before); len(d) != 0 {
				t.Errorf("after the Service lost its address the gauges moved by %v, want nothing", d)
			}
			tc.mu.Lock()
			_, owned := tc.owned[key]
			_, decided := tc.decided[key]
			tc.mu.Unlock()
			if owned || decided {
				t.Errorf("the group is still known: owned %v, decided %v", owned, decided)
			}
		})
	}
}

// TestSnapshot checks what the status page gets: decisions by Service, the Services each
// node announces, and the changes, the newest first.
func TestSnapshot(t *testing.T) {
	web := lbService("web", "198.51.100.1")
	web.Annotations["lb.baremetal.io/preferred-nodes"] = "node-a"
	dual := lbService("dual", "198.51.100.2", "2001:db8::2")
	dual.Annotations["lb.baremetal.io/preferred-nodes"] = "node-b"
	// db shares dual's IPv4 address: one group of two Services.
	db := lbService("db", "198.51.100.2")
	// A Local Service without endpoints: none may announce it.
	lost := local(lbService("lost", "198.51.100.4"))
	tc := newTestController(t, web, dual, db, lost, node("node-a", nil), node("node-b", nil))
	start := time.Now()
	for _, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.4"} {
		tc.syncKey(t, "address/"+ip)
	}

	s := tc.Snapshot()
	want := map[string]struct{ node, reason string }{
		"ns/web":  {"node-a", string(pick.ReasonPreferred)},
		"ns/dual": {"node-b", string(pick.ReasonPreferred)},
		"ns/db":   {"node-b", string(pick.ReasonPreferred)},
		"ns/lost": {"", string(pick.ReasonNoLocalEndpoints)},
	}
	if len(s.Decisions) != len(want) {
		t.Errorf("decisions for %v, want %d Services", s.Decisions, len(want))
	}
	for svc, w := range want {
		d, ok := s.Decisions[svc]
		if !ok || d.Node != w.node || d.Reason != w.reason || d.Why == "" || d.Since.Before(start) {
			t.Errorf("decision of %s = %+v, want node %q, reason %s, a why, since the test started", svc, d, w.node, w.reason)
		}
	}
	// The dual-stack Service counts once, the shared group's Services one each, and
	// nobody counts for "".
	if want := map[string]int{"node-a": 1, "node-b": 2}; !maps.Equal(s.Announces, want) {
		t.Errorf("announces = %v, want %v", s.Announces, want)
	}
	var got []string
	for _, c := range s.Changes {
		got = append(got, fmt.Sprintf("%s %s %q->%q", c.Service, c.Event, c.From, c.To))
	}
	wantChanges := []string{
		`ns/lost NoAnnouncer ""->""`,
		`ns/dual AnnouncerChanged ""->"node-b"`,
		`ns/db AnnouncerChanged ""->"node-b"`,
		`ns/web AnnouncerChanged ""->"node-a"`,
	}
	if strings.Join(got, "\n") != strings.Join(wantChanges, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantChanges, "\n"))
	}

	// The snapshot is a copy: what the page does with it does not reach the controller.
	s.Announces["node-a"] = 100
	s.Changes[0].Service = "changed"
	if again := tc.Snapshot(); again.Announces["node-a"] != 1 || again.Changes[0].Service != "ns/lost" {
		t.Errorf("changing a snapshot changed the next one: %+v", again)
	}
}

// TestChangeLogKeepsNewest checks the ring of the status page's changes: the newest
// maxChanges, newest first, however many there were.
func TestChangeLogKeepsNewest(t *testing.T) {
	for _, n := range []int{0, 1, maxChanges - 1, maxChanges, maxChanges + 1, 3*maxChanges + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var l changeLog
			for i := range n {
				l.add(Change{Service: fmt.Sprint(i)})
			}
			got := l.newestFirst()
			if want := min(n, maxChanges); len(got) != want {
				t.Fatalf("kept %d changes, want %d", len(got), want)
			}
			for i, c := range got {
				if want := fmt.Sprint(n - 1 - i); c.Service != want {
					t.Fatalf("change %d is %s, want %s", i, c.Service, want)
				}
			}
		})
	}
}
