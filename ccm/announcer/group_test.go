package announcer

import (
	"maps"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// TestServiceLeavingSharedAddress checks a group that splits: of two Services sharing
// 198.51.100.1, one gets 198.51.100.2 (as after it dropped its sharing key). Whichever
// key a worker syncs first, it ends with a decision of its own, and the old group counts
// one Service in the gauges, not two.
func TestServiceLeavingSharedAddress(t *testing.T) {
	for _, order := range [][]string{
		{"address/198.51.100.1", "address/198.51.100.2"},
		{"address/198.51.100.2", "address/198.51.100.1"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			// Together node-a has the most endpoints (2 to 1); web-b alone has only node-b's.
			tc := newTestController(t,
				lbService("web-a", "198.51.100.1"), lbService("web-b", "198.51.100.1"),
				endpointSlice("web-a", "web-a-1", endpointsOn("node-a", 2)...),
				endpointSlice("web-b", "web-b-1", endpointsOn("node-b", 1)...),
				node("node-a", nil), node("node-b", nil))
			before := gauges(t, "node-a", "node-b")

			tc.syncKey(t, "address/198.51.100.1")
			for _, svc := range []string{"web-a", "web-b"} {
				if got := tc.announcer(t, svc); got != "node-a" {
					t.Fatalf("%s: announcer = %q, want node-a, the group's", svc, got)
				}
			}
			if d := gaugeDelta(t, before); !maps.Equal(d, map[string]float64{"node-a": 2}) {
				t.Fatalf("gauges moved by %v, want node-a +2", d)
			}
			tc.settle(t, "web-a", "web-b")

			tc.updateService(t, "web-b", func(svc *v1.Service) {
				svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.2"}}
			})
			for _, key := range order {
				tc.syncKey(t, key)
			}

			if got := tc.announcer(t, "web-a"); got != "node-a" {
				t.Errorf("web-a: announcer = %q, want node-a", got)
			}
			if got := tc.announcer(t, "web-b"); got != "node-b" {
				t.Errorf("web-b: announcer = %q, want node-b, where its own endpoints are", got)
			}
			tc.mu.Lock()
			old, split := tc.owned["address/198.51.100.1"], tc.owned["address/198.51.100.2"]
			_, decided := tc.decided["address/198.51.100.2"]
			tc.mu.Unlock()
			if want := (ownership{node: "node-a", services: 1}); old != want {
				t.Errorf("old group = %+v, want %+v", old, want)
			}
			if want := (ownership{node: "node-b", services: 1}); split != want || !decided {
				t.Errorf("new group = %+v (decided: %v), want %+v", split, decided, want)
			}
			if d := gaugeDelta(t, before); !maps.Equal(d, map[string]float64{"node-a": 1, "node-b": 1}) {
				t.Errorf("gauges moved by %v, want node-a +1, node-b +1", d)
			}
			if got := tc.Snapshot().Decisions["ns/web-b"].Node; got != "node-b" {
				t.Errorf("status page: web-b announced by %q, want node-b", got)
			}
		})
	}
}

// TestServiceJoiningSharedAddress checks a group that grows: a Service that gets the
// address of another takes that address's announcer, the group's current one, even where
// the hash would choose another node and its own annotation names that other node.
// Taking its own would move the address under the partner's open connections.
func TestServiceJoiningSharedAddress(t *testing.T) {
	// hashed is the node the hash picks for 198.51.100.1 between two equal nodes; kept is
	// the other, which the group has, as after an earlier failover.
	nodes := []pick.Node{{Name: "node-a", Healthy: true}, {Name: "node-b", Healthy: true}}
	hashed := pick.Select(pick.Group{FirstIP: "198.51.100.1"}, nodes).Node
	kept := "node-a"
	if hashed == kept {
		kept = "node-b"
	}
	// "api" sorts before "web", so a vote of the members' annotations, first name
	// first on a tie, would pick hashed too: only the group's decision names kept.
	tc := newTestController(t,
		withStandbys(announcedBy(lbService("web", "198.51.100.1"), kept), hashed),
		withStandbys(announcedBy(lbService("api", "198.51.100.3"), hashed), kept),
		node("node-a", nil), node("node-b", nil))
	before := gauges(t, "node-a", "node-b")
	tc.syncKey(t, "address/198.51.100.1")
	tc.syncKey(t, "address/198.51.100.3")
	if w := tc.writes(); w != 0 {
		t.Fatalf("the annotations already held the decisions, yet syncs wrote: %v", tc.client.Actions())
	}

	tc.updateService(t, "api", func(svc *v1.Service) {
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	})
	// One sync of the group's key settles it.
	tc.syncKey(t, "address/198.51.100.1")
	if got := tc.announcer(t, "api"); got != kept {
		t.Errorf("api: announcer = %q, want %q, the group's current one", got, kept)
	}
	if got := tc.announcer(t, "web"); got != kept {
		t.Errorf("web: announcer = %q, want %q, unchanged", got, kept)
	}
	// The group api left is gone when its key is synced.
	tc.syncKey(t, "address/198.51.100.3")
	if d := gaugeDelta(t, before); !maps.Equal(d, map[string]float64{kept: 2}) {
		t.Errorf("gauges moved by %v, want %s +2", d, kept)
	}
}

// TestLocalServiceNeedsItsOwnEndpoint checks that a Local Service's address goes only to a
// node with an endpoint of that very Service: on another node its traffic is dropped, even
// if a Cluster Service sharing the address has more endpoints there.
func TestLocalServiceNeedsItsOwnEndpoint(t *testing.T) {
	tc := newTestController(t,
		local(lbService("local", "198.51.100.1")), lbService("cluster", "198.51.100.1"),
		endpointSlice("local", "local-1", readyOn("node-a")),
		endpointSlice("cluster", "cluster-1", endpointsOn("node-b", 3)...),
		node("node-a", nil), node("node-b", nil))
	key := "address/198.51.100.1"

	tc.syncKey(t, key)
	for _, svc := range []string{"local", "cluster"} {
		if got := tc.announcer(t, svc); got != "node-a" {
			t.Errorf("%s: announcer = %q, want node-a, the only node with an endpoint of ns/local", svc, got)
		}
	}
	tc.settle(t, "local", "cluster")
	tc.events()

	tc.setEndpoints(t, "local-1")
	tc.syncKey(t, key)
	for _, svc := range []string{"local", "cluster"} {
		if got := tc.announcer(t, svc); got != "" {
			t.Errorf("%s: announcer = %q, want none: node-b has no endpoint of ns/local", svc, got)
		}
	}
	ev := tc.events()
	if len(ev) != 2 {
		t.Fatalf("events = %q, want a %s for each Service", ev, ReasonNoAnnouncer)
	}
	for _, e := range ev {
		if !strings.HasPrefix(e, "Warning "+ReasonNoAnnouncer+" ") || !strings.Contains(e, "ns/local") {
			t.Errorf("event %q: want a %s warning naming ns/local", e, ReasonNoAnnouncer)
		}
	}
	if got := tc.Snapshot().Decisions["ns/cluster"].Reason; got != string(pick.ReasonNoLocalEndpoints) {
		t.Errorf("reason = %q, want %s", got, pick.ReasonNoLocalEndpoints)
	}
}

// twoPoolConfig puts a dual-stack Service's IPv4 address in a pool for the nodes of zone
// a, and its IPv6 address in one for the nodes with IPv6: its one announcer must be in both.
const twoPoolConfig = `pools:
- name: v4
  addresses: [198.51.100.0/24]
  nodeSelector:
    matchLabels: {zone: a}
- name: v6
  addresses: ["2001:db8::/64"]
  nodeSelector:
    matchLabels: {ipv6: "yes"}
`

// TestDualStackNeedsEveryPoolsNodeSelector checks that a group's announcer matches the
// nodeSelector of the pool of each of its addresses, not only of its first.
func TestDualStackNeedsEveryPoolsNodeSelector(t *testing.T) {
	v4only := node("v4-only", map[string]string{"zone": "a"})
	v6only := node("v6-only", map[string]string{"zone": "b", "ipv6": "yes"})
	both := node("both", map[string]string{"zone": "a", "ipv6": "yes"})
	for _, tt := range []struct {
		name   string
		nodes  []*v1.Node
		want   string
		reason pick.Reason
	}{
		// The endpoints are on the one-pool nodes, which would win if a pool were
		// overlooked.
		{name: "one node in both pools", nodes: []*v1.Node{v4only, v6only, both}, want: "both", reason: pick.ReasonNoEndpoints},
		{name: "no node in both pools", nodes: []*v1.Node{v4only, v6only}, want: "", reason: pick.ReasonNoEligibleNode},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := lbService("dual", "198.51.100.1", "2001:db8::1")
			svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
			objs := []runtime.Object{svc, endpointSlice("dual", "dual-1", append(endpointsOn("v4-only", 3), endpointsOn("v6-only", 3)...)...)}
			for _, n := range tt.nodes {
				objs = append(objs, n.DeepCopy())
			}
			tc := newTestControllerWithConfig(t, twoPoolConfig, objs...)

			tc.syncKey(t, "address/198.51.100.1")
			if got := tc.announcer(t, "dual"); got != tt.want {
				t.Errorf("announcer = %q, want %q", got, tt.want)
			}
			d := tc.Snapshot().Decisions["ns/dual"]
			if d.Reason != string(tt.reason) {
				t.Errorf("reason = %q, want %s", d.Reason, tt.reason)
			}
			if tt.want == "" {
				ev := tc.events()
				if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+ReasonNoAnnouncer) {
					t.Fatalf("events = %q, want one %s", ev, ReasonNoAnnouncer)
				}
				for _, why := range []string{"v4-only does not match the nodeSelector of pool v6", "v6-only does not match the nodeSelector of pool v4"} {
					if !strings.Contains(ev[0], why) {
						t.Errorf("event %q does not say %q", ev[0], why)
					}
				}
			}
		})
	}
}

// TestAddressesTieGroups checks that a Service holding two addresses ties their groups
// together: web holds an IPv4 and an IPv6 address, and api holds only the IPv6 one, so
// the IPv4 address's one sync decides for both, on the endpoints of both.
func TestAddressesTieGroups(t *testing.T) {
	tc := newTestController(t,
		lbService("web", "198.51.100.1", "2001:db8::1"), lbService("api", "2001:db8::1"),
		endpointSlice("web", "web-1", readyOn("node-a")),
		endpointSlice("api", "api-1", endpointsOn("node-b", 3)...),
		node("node-a", nil), node("node-b", nil))

	tc.syncKey(t, "address/198.51.100.1")
	for _, svc := range []string{"web", "api"} {
		if got := tc.announcer(t, svc); got != "node-b" {
			t.Errorf("%s: announcer = %q, want node-b, with the group's most endpoints", svc, got)
		}
	}
	tc.mu.Lock()
	got := tc.owned["address/198.51.100.1"]
	tc.mu.Unlock()
	if want := (ownership{node: "node-b", services: 2}); got != want {
		t.Errorf("ownership = %+v, want %+v", got, want)
	}
}
