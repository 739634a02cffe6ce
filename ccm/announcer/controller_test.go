package announcer

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

// TestEnqueueNodeQueuesItsGroupsFirst checks that when an agent changes state, the groups
// its node announces are decided before every other: with thousands of Services, those
// that lost their announcer must not wait behind the rest.
func TestEnqueueNodeQueuesItsGroupsFirst(t *testing.T) {
	const perNode = 5
	var objs []runtime.Object
	var aKeys, allKeys []string
	for i := range 2 * perNode {
		on := "node-a"
		if i%2 == 1 { // interleaved, so that no order of names puts node-a's first
			on = "node-b"
		}
		ip := fmt.Sprintf("198.51.100.%d", i+1)
		other := "node-b"
		if on == "node-b" {
			other = "node-a"
		}
		// Preferred, and already announced there with the other node standing by:
		// deciding writes nothing, so no watch event adds to the queue behind the test's
		// back.
		svc := withStandbys(announcedBy(lbService(fmt.Sprintf("svc-%d", i), ip), on), other)
		svc.Annotations["lb.baremetal.io/preferred-nodes"] = on
		objs = append(objs, svc)
		allKeys = append(allKeys, "address/"+ip)
		if on == "node-a" {
			aKeys = append(aKeys, "address/"+ip)
		}
	}
	tc := newTestController(t, objs...)
	// The Nodes go straight into the cache: a Node event queues every group, at a moment
	// the test could not tell, and the order under test is that of an otherwise empty
	// queue.
	for _, n := range []string{"node-a", "node-b"} {
		if err := tc.factory.Core().V1().Nodes().Informer().GetIndexer().Add(node(n, nil)); err != nil {
			t.Fatal(err)
		}
	}
	// Each Service's Add event queued its address; once all are there no event is left
	// to come, and the queue is emptied for the test.
	poll(t, "the Services' events", func() bool { return tc.queue.Len() == len(allKeys) })
	for tc.queue.Len() > 0 {
		key, _ := tc.queue.Get()
		tc.queue.Done(key)
	}
	for _, key := range allKeys {
		tc.syncKey(t, key)
	}
	if w := tc.writes(); w != 0 {
		t.Fatalf("deciding wrote: %v", tc.client.Actions())
	}
	if tc.queue.Len() != 0 {
		t.Fatalf("deciding queued %d groups", tc.queue.Len())
	}

	// The prober's callback, as Run registers it.
	tc.health.OnChange(tc.enqueueNode)
	tc.health.set("node-a", liveness.Down)

	var got []string
	for tc.queue.Len() > 0 {
		key, _ := tc.queue.Get()
		tc.queue.Done(key)
		got = append(got, key)
	}
	if len(got) != len(allKeys) {
		t.Fatalf("queued %v, want every group once: %v", got, allKeys)
	}
	first := slices.Sorted(slices.Values(got[:len(aKeys)]))
	want := slices.Sorted(slices.Values(aKeys))
	if !slices.Equal(first, want) {
		t.Errorf("queue order %v: want node-a's groups %v first", got, want)
	}
	for _, key := range allKeys {
		if !slices.Contains(got, key) {
			t.Errorf("group %s was not queued; queued %v", key, got)
		}
	}
}

// TestSyncForwardsToLowestAddress checks that a key which is no longer its group's lowest
// address hands the group to that address's key, rather than deciding it twice.
func TestSyncForwardsToLowestAddress(t *testing.T) {
	// No Node: its event would queue every group at a moment the test cannot tell.
	tc := newTestController(t, lbService("dual", "2001:db8::1", "198.51.100.1"))
	poll(t, "the Service's event", func() bool { return tc.queue.Len() == 2 })
	for tc.queue.Len() > 0 {
		key, _ := tc.queue.Get()
		tc.queue.Done(key)
	}
	tc.syncKey(t, "address/2001:db8::1")
	if tc.queue.Len() != 1 {
		t.Fatalf("queue holds %d keys, want the lowest address's", tc.queue.Len())
	}
	if key, _ := tc.queue.Get(); key != "address/198.51.100.1" {
		t.Errorf("queued %q, want address/198.51.100.1", key)
	}
}
