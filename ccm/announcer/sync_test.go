package announcer

import (
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// TestReadyEndpointsCountsOnlyReadyEndpointsWithANode checks which endpoints rank a node:
// only those that can take traffic now, on a known node, of this very Service.
func TestReadyEndpointsCountsOnlyReadyEndpointsWithANode(t *testing.T) {
	svc := lbService("web", "198.51.100.1")
	slice := endpointSlice("web", "web-1",
		endpoint(ptr.To("a"), ptr.To(true), nil),
		endpoint(ptr.To("a"), nil, nil),                    // unknown readiness counts as ready
		endpoint(ptr.To("a"), ptr.To(true), ptr.To(false)), // explicitly not terminating
		endpoint(ptr.To("b"), ptr.To(false), nil),          // not ready
		endpoint(ptr.To("b"), ptr.To(true), ptr.To(true)),  // terminating
		endpoint(ptr.To("b"), nil, ptr.To(true)),           // terminating, readiness unknown
		endpoint(nil, ptr.To(true), nil),                   // no node
	)
	// A second slice of the same Service counts too: large Services have several.
	more := endpointSlice("web", "web-2", readyOn("c"))
	// Another Service's endpoints are not this one's.
	other := endpointSlice("other", "other-1", readyOn("d"))
	tc := newTestController(t, svc, slice, more, other)

	got, err := tc.readyEndpoints(svc)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a": 3, "c": 1}; !maps.Equal(got, want) {
		t.Errorf("ready endpoints = %v, want %v", got, want)
	}
}

// TestSyncWritesOnlyChanges checks that a decision is one patch per Service, and that a
// sync with nothing changed writes nothing: after a node failure every group is synced,
// and only the moved ones may cost a request.
func TestSyncWritesOnlyChanges(t *testing.T) {
	tc := newTestController(t, lbService("web", "198.51.100.1"), node("node-a", nil))
	key := "address/198.51.100.1"

	tc.syncKey(t, key)
	if w := tc.writes(); w != 1 {
		t.Fatalf("first sync made %d writes, want 1 patch: %v", w, tc.client.Actions())
	}
	if got := tc.announcer(t, "web"); got != "node-a" {
		t.Fatalf("announcer = %q, want node-a", got)
	}
	if ev := tc.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal "+ReasonAnnouncerChanged) {
		t.Errorf("events = %q, want one %s", ev, ReasonAnnouncerChanged)
	}

	// The cache catches up with the patch; syncing again writes nothing and says nothing.
	tc.settle(t, "web")
	tc.syncKey(t, key)
	if w := tc.writes(); w != 1 {
		t.Errorf("a sync with nothing changed wrote: %v", tc.client.Actions()[len(tc.client.Actions())-1])
	}
	if ev := tc.events(); len(ev) != 0 {
		t.Errorf("a sync with nothing changed recorded events %q", ev)
	}
}

// TestDualStackHasOneAnnouncer checks that both addresses of a dual-stack Service go to
// one node, decided under the group's lowest address whichever address is synced: two
// decisions could name two nodes for one Service.
func TestDualStackHasOneAnnouncer(t *testing.T) {
	// The IPv6 address first, as for a Service whose ipFamilies start with IPv6.
	svc := lbService("dual", "2001:db8::1", "198.51.100.1")
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	tc := newTestController(t, svc, node("node-a", nil), node("node-b", nil))

	// The IPv6 address's key is not the group's name: its sync hands over, deciding
	// nothing.
	tc.syncKey(t, "address/2001:db8::1")
	if w := tc.writes(); w != 0 {
		t.Errorf("sync of the higher address wrote: %v", tc.client.Actions())
	}
	tc.mu.Lock()
	keys := slices.Sorted(maps.Keys(tc.decided))
	tc.mu.Unlock()
	if len(keys) != 0 {
		t.Errorf("sync of the higher address decided %v", keys)
	}

	tc.syncKey(t, "address/198.51.100.1")
	if w := tc.writes(); w != 1 {
		t.Fatalf("sync of the lowest address made %d writes, want 1: %v", w, tc.client.Actions())
	}
	got := tc.announcer(t, "dual")
	if got != "node-a" && got != "node-b" {
		t.Fatalf("announcer = %q, want a node", got)
	}
	tc.mu.Lock()
	keys = slices.Sorted(maps.Keys(tc.decided))
	owned := tc.owned["address/198.51.100.1"]
	tc.mu.Unlock()
	if !slices.Equal(keys, []string{"address/198.51.100.1"}) {
		t.Errorf("decided groups = %v, want only address/198.51.100.1", keys)
	}
	// One Service, however many addresses: the gauges count Services.
	if want := (ownership{node: got, services: 1}); owned != want {
		t.Errorf("ownership = %+v, want %+v", owned, want)
	}
	if ev := tc.events(); len(ev) != 1 || !strings.Contains(ev[0], "Announcer of 198.51.100.1 ") {
		t.Errorf("events = %q, want one naming the lowest address", ev)
	}

	// With the decision seen, the IPv6 key still writes nothing.
	tc.settle(t, "dual")
	tc.syncKey(t, "address/2001:db8::1")
	tc.syncKey(t, "address/198.51.100.1")
	if w := tc.writes(); w != 1 {
		t.Errorf("syncs with nothing changed wrote: %v", tc.client.Actions())
	}
}

// TestSyncServiceRemovesAnnouncerWithoutAddresses checks the "service/" keys: a Service
// whose addresses were withdrawn must not keep naming a node, or that node's agent would
// go on announcing an address that may be someone else's now.
func TestSyncServiceRemovesAnnouncerWithoutAddresses(t *testing.T) {
	for _, tt := range []struct {
		name string
		svc  *v1.Service
		// want is the annotation after the sync; "-" for absent.
		want   string
		writes int
	}{
		{name: "no address, announcer set", svc: announcedBy(lbService("web"), "node-a"), want: "-", writes: 1},
		{name: "no longer a LoadBalancer", svc: func() *v1.Service {
			svc := announcedBy(lbService("web"), "node-a")
			svc.Spec.Type = v1.ServiceTypeClusterIP
			return svc
		}(), want: "-", writes: 1},
		{name: "no address, no announcer", svc: lbService("web"), want: "-", writes: 0},
		// With addresses its groups decide, not this key: it must not remove the
		// annotation of a Service that got its address back since it was queued.
		{name: "has an address again", svc: announcedBy(lbService("web", "198.51.100.1"), "node-a"), want: "node-a", writes: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestController(t, tt.svc, node("node-a", nil))
			tc.syncKey(t, "service/ns/web")
			got, ok := tc.service(t, "web").Annotations[annotation.Announcer]
			if !ok {
				got = "-"
			}
			if got != tt.want {
				t.Errorf("announcer = %q, want %q", got, tt.want)
			}
			if w := tc.writes(); w != tt.writes {
				t.Errorf("writes = %d, want %d: %v", w, tt.writes, tc.client.Actions())
			}
		})
	}
}

// TestSyncRemovesAnnouncerOfServicesNotAnnounced checks the Services that still hold a
// group's address but are not to be announced: the annotation must go, or an agent would
// go on answering for a Service that is being deleted or is another implementation's.
func TestSyncRemovesAnnouncerOfServicesNotAnnounced(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*v1.Service)
	}{
		{name: "being deleted", change: func(svc *v1.Service) {
			svc.DeletionTimestamp = ptr.To(metav1.Now())
			svc.Finalizers = []string{"service.kubernetes.io/load-balancer-cleanup"}
		}},
		{name: "another class", change: func(svc *v1.Service) { svc.Spec.LoadBalancerClass = ptr.To("example.com/other") }},
		{name: "no longer a LoadBalancer", change: func(svc *v1.Service) { svc.Spec.Type = v1.ServiceTypeNodePort }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gone := announcedBy(lbService("gone", "198.51.100.1"), "node-a")
			tt.change(gone)
			// web shares the address and keeps its announcer.
			tc := newTestController(t, gone, announcedBy(lbService("web", "198.51.100.1"), "node-a"), node("node-a", nil))
			tc.syncKey(t, "address/198.51.100.1")
			if _, ok := tc.service(t, "gone").Annotations[annotation.Announcer]; ok {
				t.Errorf("gone: announcer still set")
			}
			if got := tc.announcer(t, "web"); got != "node-a" {
				t.Errorf("web: announcer = %q, want node-a", got)
			}
			if w := tc.writes(); w != 1 {
				t.Errorf("writes = %d, want the one removal: %v", w, tc.client.Actions())
			}
			tc.mu.Lock()
			got := tc.owned["address/198.51.100.1"]
			tc.mu.Unlock()
			if want := (ownership{node: "node-a", services: 1}); got != want {
				t.Errorf("ownership = %+v, want %+v: only web counts", got, want)
			}
		})
	}
}

// TestSyncServiceOfDeletedService checks that a Service deleted since it was queued is no
// error: retrying it would never end.
func TestSyncServiceOfDeletedService(t *testing.T) {
	tc := newTestController(t)
	tc.syncKey(t, "service/ns/gone")
	if w := tc.writes(); w != 0 {
		t.Errorf("writes = %v", tc.client.Actions())
	}
}

// TestNoSecondPatchBeforeTheCacheSeesTheFirst checks that a group synced again before the
// watch delivers the announcer patch is not patched, and announced in events, twice.
func TestNoSecondPatchBeforeTheCacheSeesTheFirst(t *testing.T) {
	tc := newTestController(t, lbService("web", "198.51.100.1"), node("node-a", nil))
	key := "address/198.51.100.1"
	// Both syncs see the Service as it was before the patch: the indexer is not told.
	if err := tc.sync(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	stale := tc.service(t, "web")
	if err := tc.sync(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if tc.service(t, "web").ResourceVersion != stale.ResourceVersion {
		t.Skip("the cache saw the patch between the two syncs; nothing to check")
	}
	if w := tc.writes(); w != 1 {
		t.Errorf("two syncs on one cached version made %d writes, want 1", w)
	}
	if ev := tc.events(); len(ev) != 1 {
		t.Errorf("events %q, want one AnnouncerChanged", ev)
	}
}

// TestDualStackEndpointsCountOnce checks that a dual-stack Service's pods, listed in one
// slice per family, count once: counted twice, one pod would outweigh another Service's
// two.
func TestDualStackEndpointsCountOnce(t *testing.T) {
	v4 := endpointSlice("web", "web-v4", readyOn("node-a"))
	v6 := endpointSlice("web", "web-v6", readyOn("node-a"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	tc := newTestController(t, lbService("web", "198.51.100.1"), v4, v6)
	got, err := tc.readyEndpoints(tc.service(t, "web"))
	if err != nil {
		t.Fatal(err)
	}
	if got["node-a"] != 1 {
		t.Errorf("endpoints %v, want node-a:1", got)
	}
}
