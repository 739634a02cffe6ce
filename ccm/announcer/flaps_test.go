package announcer

import (
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// TestFlappingStandbyIsWrittenTwice flaps a standby's agent down and up five times, on
// three nodes, where no other node can take its place in the standbys: they are written
// when it first goes down, and once more when it has held up for the hold, not on every
// flap.
func TestFlappingStandbyIsWrittenTwice(t *testing.T) {
	r := ranked("198.51.100.1", "node-a", "node-b", "node-c")
	svc := withStandbys(announcedBy(lbService("web", "198.51.100.1"), r[0]), r[1], r[2])
	tc := newTestController(t, svc, node("node-a", nil), node("node-b", nil), node("node-c", nil))
	const hold = 300 * time.Millisecond
	tc.returns.hold = hold
	key := "address/198.51.100.1"
	tc.syncKey(t, key)
	held, _ := testutil.GetCounterMetricValue(standbysHeld)

	var back time.Time
	for range 5 {
		tc.health.set(r[2], liveness.Down)
		tc.syncKey(t, key)
		tc.settle(t, "web")
		tc.health.set(r[2], liveness.Up)
		back = time.Now()
		tc.syncKey(t, key)
		tc.settle(t, "web")
	}
	patches := tc.planPatches(t, 0)
	if len(patches) != 1 || patches[0].announcer == nil || *patches[0].announcer != r[0] || patches[0].standbys == nil || *patches[0].standbys != r[1] {
		t.Fatalf("five flaps of standby %s patched %+v, want one patch of the standbys to %q", r[2], patches, r[1])
	}
	if v, _ := testutil.GetCounterMetricValue(standbysHeld); v < held+5 {
		t.Errorf("baremetal_ccm_standby_writes_held_total %v, want at least %v: one for each return", v, held+5)
	}

	// Held up: the next sync past the hold names it again, in the rule's place.
	poll(t, "the standbys to name "+r[2]+" again", func() bool {
		tc.syncKey(t, key)
		_, s := tc.plan(t, "web")
		return s == r[1]+","+r[2]
	})
	if took := time.Since(back); took < hold {
		t.Errorf("%s named a standby again %v after it came back, want the hold, %v", r[2], took, hold)
	}
	if n := len(tc.planPatches(t, 0)); n != 2 {
		t.Errorf("%d patches in all, want 2", n)
	}
	if ev := tc.events(); len(ev) != 0 {
		t.Errorf("standby flaps recorded %q", ev)
	}
}

// TestHoldStandbys checks when a change of the standbys alone waits.
func TestHoldStandbys(t *testing.T) {
	nodes := []pick.Node{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}, {Name: "c", Healthy: true}, {Name: "d"}}
	for _, tc := range []struct {
		name     string
		old, new []string
		holding  map[string]time.Duration
		want     time.Duration
	}{
		{"a node back lately added", []string{"c"}, []string{"b", "c"}, map[string]time.Duration{"b": time.Second}, time.Second},
		{"pushing a healthy one out", []string{"b", "c"}, []string{"a", "b"}, map[string]time.Duration{"a": time.Second}, time.Second},
		{"the longest hold", []string{"c"}, []string{"a", "b"}, map[string]time.Duration{"a": time.Second, "b": 2 * time.Second}, 2 * time.Second},
		{"no standbys before", nil, []string{"b"}, map[string]time.Duration{"b": time.Second}, time.Second},
		{"a node not back lately added", []string{"c"}, []string{"b", "c"}, nil, 0},
		{"one of two added not back lately", []string{"c"}, []string{"a", "b"}, map[string]time.Duration{"a": time.Second}, 0},
		{"a down standby dropped", []string{"b", "d"}, []string{"a", "b"}, map[string]time.Duration{"a": time.Second}, 0},
		{"a node gone dropped", []string{"b", "e"}, []string{"a", "b"}, map[string]time.Duration{"a": time.Second}, 0},
		{"only dropped", []string{"b", "c"}, []string{"b"}, nil, 0},
		{"reordered", []string{"b", "c"}, []string{"c", "b"}, nil, 0},
	} {
		if got := holdStandbys(tc.old, tc.new, tc.holding, nodes); got != tc.want {
			t.Errorf("%s: holdStandbys(%q, %q) = %v, want %v", tc.name, tc.old, tc.new, got, tc.want)
		}
	}
}
