package announcer

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// overloaded returns n Services all announced by node-a, and the nodes node-a, node-b.
func overloaded(n int) ([]runtime.Object, []string) {
	var objs []runtime.Object
	var names []string
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, announcedBy(lbService(name, fmt.Sprintf("198.51.100.%d", 10+i)), "node-a"))
		names = append(names, name)
	}
	return append(objs, node("node-a", nil), node("node-b", nil)), names
}

// overBound is the sentence of a move for balance; node-a holds fewer as each sync applies
// a decision of every group that the previous syncs' patches changed.
var overBound = regexp.MustCompile(`node-a holds [4-6] addresses, over the bound of 3; node-b holds [0-2]$`)

// TestAnnouncerBalances checks that a node over its bound gives groups to the node under
// its own, with events saying so, and only with rebalancing on; and that a ccm starting
// over the result (a new leader) writes nothing.
func TestAnnouncerBalances(t *testing.T) {
	for _, rebalance := range []bool{true, false} {
		objs, names := overloaded(6)
		tc := newTestControllerWithConfig(t, defaultConfig+fmt.Sprintf("failover:\n  rebalance: %t\n", rebalance), objs...)
		for i := range names {
			tc.syncKey(t, fmt.Sprintf("address/198.51.100.%d", 10+i))
		}
		held := map[string]int{}
		for _, name := range names {
			held[tc.announcer(t, name)]++
		}
		want := map[string]int{"node-a": 3, "node-b": 3}
		if !rebalance {
			want = map[string]int{"node-a": 6}
		}
		if fmt.Sprint(held) != fmt.Sprint(want) {
			t.Errorf("rebalance %t: announcers hold %v, want %v", rebalance, held, want)
		}
		ev := tc.events()
		moved := 0
		for _, e := range ev {
			if strings.Contains(e, ReasonAnnouncerChanged) {
				moved++
				if !overBound.MatchString(e) {
					t.Errorf("rebalance %t: event %q does not say why", rebalance, e)
				}
			}
		}
		if moved != want["node-b"] {
			t.Errorf("rebalance %t: %d AnnouncerChanged events, want %d: %q", rebalance, moved, want["node-b"], ev)
		}

		if !rebalance {
			continue
		}
		tc.settle(t, names...)
		var published []runtime.Object
		for _, name := range names {
			published = append(published, tc.service(t, name))
		}
		next := newTestControllerWithConfig(t, defaultConfig, append(published, node("node-a", nil), node("node-b", nil))...)
		for i := range names {
			next.syncKey(t, fmt.Sprintf("address/198.51.100.%d", 10+i))
		}
		if n := next.writes(); n != 0 {
			t.Errorf("a new leader over the balanced Services wrote %d times", n)
		}
	}
}

// BenchmarkDecideAll decides 5,000 Services, each with an EndpointSlice, over 100 nodes
// from the caches, as after a node event: listing the groups and pick.Assign.
func BenchmarkDecideAll(b *testing.B) {
	var objs []runtime.Object
	for i := range 100 {
		objs = append(objs, node(fmt.Sprintf("node-%03d", i), nil))
	}
	for i := range 5000 {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, lbService(name, fmt.Sprintf("2001:db8::%x", i+1)),
			endpointSlice(name, name, readyOn(fmt.Sprintf("node-%03d", i%100)), readyOn(fmt.Sprintf("node-%03d", (i+1)%100))))
	}
	tc := newTestController(b, objs...)
	// The informers' handlers queue every Service once per node added: let them finish.
	for n := -1; n != tc.queue.Len(); time.Sleep(200 * time.Millisecond) {
		n = tc.queue.Len()
	}
	nodes, err := tc.nodeStates()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		tc.spread.mu.Lock()
		if err := tc.decideAll(nodes); err != nil {
			b.Fatal(err)
		}
		tc.spread.mu.Unlock()
	}
	b.ReportMetric(float64(len(tc.spread.rankings)), "groups")
}
