package announcer

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// withStandbys sets the standbys annotation, as a previous decision left it.
func withStandbys(svc *v1.Service, nodes ...string) *v1.Service {
	svc.Annotations[annotation.Standbys] = strings.Join(nodes, ",")
	return svc
}

// plannedPatch is what one patch of a Service's plan wrote: nil for a key it removed.
type plannedPatch struct {
	service                   string
	announcer, standbys       *string
	hasAnnouncer, hasStandbys bool
}

// planPatches returns the patches made since the action at index from, decoded.
func (tc *testController) planPatches(t *testing.T, from int) []plannedPatch {
	t.Helper()
	var out []plannedPatch
	for _, a := range tc.client.Actions()[from:] {
		p, ok := a.(k8stesting.PatchAction)
		if !ok {
			continue
		}
		var body struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		pp := plannedPatch{service: p.GetName()}
		pp.announcer, pp.hasAnnouncer = body.Metadata.Annotations[annotation.Announcer]
		pp.standbys, pp.hasStandbys = body.Metadata.Annotations[annotation.Standbys]
		out = append(out, pp)
	}
	return out
}

// plan returns the announcer and standby annotations of the Service as the API has it.
func (tc *testController) plan(t *testing.T, name string) (string, string) {
	t.Helper()
	a := tc.service(t, name).Annotations
	return a[annotation.Announcer], a[annotation.Standbys]
}

// ranked returns the rule's order of healthy nodes without endpoints for ip.
func ranked(ip string, nodes ...string) []string {
	var ns []pick.Node
	for _, n := range nodes {
		ns = append(ns, pick.Node{Name: n, Healthy: true})
	}
	out, _ := pick.Rank(pick.Group{FirstIP: ip}, ns)
	return out
}

// TestFirstDecisionWritesThePlan checks that the first decision publishes the announcer
// and at most two standbys, in the rule's order, in one patch.
func TestFirstDecisionWritesThePlan(t *testing.T) {
	r := ranked("198.51.100.1", "node-a", "node-b", "node-c", "node-d")
	tc := newTestController(t, lbService("web", "198.51.100.1"), node("node-a", nil), node("node-b", nil), node("node-c", nil), node("node-d", nil))
	tc.syncKey(t, "address/198.51.100.1")
	patches := tc.planPatches(t, 0)
	if len(patches) != 1 || !patches[0].hasAnnouncer || !patches[0].hasStandbys || tc.writes() != 1 {
		t.Fatalf("first decision patched %+v (%d writes), want one patch of both annotations", patches, tc.writes())
	}
	if a, s := tc.plan(t, "web"); a != r[0] || s != r[1]+","+r[2] {
		t.Errorf("plan %q, standbys %q; want %q, %q", a, s, r[0], r[1]+","+r[2])
	}
}

// TestFailoverWritesThePlanInOnePatch checks a failover: the first standby of the plan
// takes over, though the hash ranks another node first, and the announcer and the
// standbys change in one patch, so that no agent ever reads a plan half written.
func TestFailoverWritesThePlanInOnePatch(t *testing.T) {
	r := ranked("198.51.100.1", "node-a", "node-b", "node-c", "node-d")
	// The published plan puts the hash's third before its second, as an older decision
	// could have.
	svc := withStandbys(announcedBy(lbService("web", "198.51.100.1"), r[0]), r[2], r[1])
	tc := newTestController(t, svc, node("node-a", nil), node("node-b", nil), node("node-c", nil), node("node-d", nil))
	key := "address/198.51.100.1"

	tc.health.set(r[0], liveness.Down)
	before := len(tc.client.Actions())
	tc.syncKey(t, key)
	patches := tc.planPatches(t, before)
	if len(patches) != 1 || !patches[0].hasAnnouncer || !patches[0].hasStandbys {
		t.Fatalf("failover patched %+v, want one patch of both annotations", patches)
	}
	if a, s := tc.plan(t, "web"); a != r[2] || s != r[1]+","+r[3] {
		t.Errorf("after %s went down: announcer %q, standbys %q; want %q, %q", r[0], a, s, r[2], r[1]+","+r[3])
	}
	if got := tc.Snapshot().Decisions["ns/web"].Reason; got != string(pick.ReasonStandby) {
		t.Errorf("reason %q, want %s", got, pick.ReasonStandby)
	}
	if ev := tc.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal "+ReasonAnnouncerChanged) {
		t.Errorf("events %q, want one %s", ev, ReasonAnnouncerChanged)
	}

	// Seen by the cache, the plan is not written again.
	tc.settle(t, "web")
	w := tc.writes()
	tc.syncKey(t, key)
	if tc.writes() != w {
		t.Errorf("a sync with nothing changed wrote %v", tc.client.Actions()[w:])
	}
}

// TestStandbysOnlyChange checks that a change of the standbys alone is written, since the
// agents act on it when the announcer fails, but tells no one: the announcer stays.
func TestStandbysOnlyChange(t *testing.T) {
	r := ranked("198.51.100.1", "node-a", "node-b", "node-c")
	svc := withStandbys(announcedBy(lbService("web", "198.51.100.1"), r[0]), r[1], r[2])
	tc := newTestController(t, svc, node("node-a", nil), node("node-b", nil), node("node-c", nil))
	key := "address/198.51.100.1"
	tc.syncKey(t, key)
	if w := tc.writes(); w != 0 {
		t.Fatalf("the annotations held the plan, yet the sync wrote %v", tc.client.Actions())
	}

	tc.health.set(r[1], liveness.Down)
	tc.syncKey(t, key)
	patches := tc.planPatches(t, 0)
	if len(patches) != 1 || !patches[0].hasStandbys || patches[0].standbys == nil || *patches[0].standbys != r[2] {
		t.Fatalf("a standby down patched %+v, want one patch of the standbys to %q", patches, r[2])
	}
	if a, s := tc.plan(t, "web"); a != r[0] || s != r[2] {
		t.Errorf("announcer %q, standbys %q; want %q, %q", a, s, r[0], r[2])
	}
	if ev := tc.events(); len(ev) != 0 {
		t.Errorf("a standbys-only change recorded %q", ev)
	}

	// The last standby down too: the standbys annotation goes, the announcer stays.
	tc.settle(t, "web")
	tc.health.set(r[2], liveness.Down)
	tc.syncKey(t, key)
	if a, s := tc.plan(t, "web"); a != r[0] || s != "" {
		t.Errorf("announcer %q, standbys %q; want %q and none", a, s, r[0])
	}
	if _, ok := tc.service(t, "web").Annotations[annotation.Standbys]; ok {
		t.Error("an empty standbys annotation was left")
	}
	if ev := tc.events(); len(ev) != 0 {
		t.Errorf("a standbys-only change recorded %q", ev)
	}
}

// TestWithdrawnServiceLosesItsPlan checks that a Service without addresses keeps neither
// an announcer nor standbys: a standby would otherwise take an address that may be
// someone else's now.
func TestWithdrawnServiceLosesItsPlan(t *testing.T) {
	for name, svc := range map[string]*v1.Service{
		"announcer and standbys": withStandbys(announcedBy(lbService("web"), "node-a"), "node-b"),
		"standbys only":          withStandbys(lbService("web"), "node-b"),
	} {
		t.Run(name, func(t *testing.T) {
			tc := newTestController(t, svc, node("node-a", nil))
			tc.syncKey(t, "service/ns/web")
			a := tc.service(t, "web").Annotations
			if _, ok := a[annotation.Announcer]; ok {
				t.Errorf("announcer left: %v", a)
			}
			if _, ok := a[annotation.Standbys]; ok {
				t.Errorf("standbys left: %v", a)
			}
			if p := tc.planPatches(t, 0); len(p) != 1 {
				t.Errorf("patches %+v, want one", p)
			}
		})
	}
}

// TestReplacedUntilTheAnnotationsMoved checks the hold on a node that went down: while the
// annotations still name it, it is held (prober.Held), and once they name the standby it
// is released at the cache's version, which its agent must reach before it announces
// again.
func TestReplacedUntilTheAnnotationsMoved(t *testing.T) {
	r := ranked("198.51.100.1", "node-a", "node-b", "node-c")
	svc := withStandbys(announcedBy(lbService("web", "198.51.100.1"), r[0]), r[1], r[2])
	tc := newTestController(t, svc, node("node-a", nil), node("node-b", nil), node("node-c", nil))
	key := "address/198.51.100.1"

	tc.health.set(r[0], liveness.Down)
	tc.syncKey(t, key)
	if got := tc.health.replacedNodes(); got[r[0]] != prober.Held {
		t.Fatalf("replaced %v after %s went down and the annotation still names it, want it held", got, r[0])
	}
	tc.health.set(r[0], liveness.Replaced) // it answers again, and the prober says so

	tc.settle(t, "web") // the cache sees the patch
	tc.syncKey(t, key)
	got, ok := tc.health.replacedNodes()[r[0]]
	if !ok || got == prober.Held || got != tc.cacheVersion() {
		t.Errorf("replaced %v once the annotation names %s, want %s released at the cache's version %d", tc.health.replacedNodes(), r[1], r[0], tc.cacheVersion())
	}
	if a, _ := tc.plan(t, "web"); a != r[1] {
		t.Errorf("announcer %q, want %q", a, r[1])
	}
}
