package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// TestRestoreAppliesPoolRules checks that Restore adopts an address only where Assign
// would give it: in the pool the Service names, in a pool that admits the Service. A
// status is anyone's to write, so it must not open a pool to a Service the pool refuses.
func TestRestoreAppliesPoolRules(t *testing.T) {
	closed := testPool(t, "closed", "198.51.100.0/30")
	closed.Namespaces = []string{"team-a"}
	a := New([]config.Pool{closed, testPool(t, "open", "203.0.113.0/30")})
	err := a.Restore([]Assignment{
		{Service: "team-a/web", Namespace: "team-a", Addresses: addrs("198.51.100.1")},
		{Service: "team-b/web", Namespace: "team-b", Addresses: addrs("198.51.100.2")},
		{Service: "team-b/named", Namespace: "team-b", Pool: "open", Addresses: addrs("203.0.113.1", "2001:db8::1")},
		{Service: "team-a/named", Namespace: "team-a", Pool: "open", Addresses: addrs("198.51.100.3")},
	})
	want := []string{
		`team-b/web: pool "closed" does not allow Services in namespace "team-b" with these labels (see its namespaces and serviceSelector)`,
		"team-b/named: address 2001:db8::1 is not in any pool of the cloud-config",
		`team-a/named: address 198.51.100.3 is not in pool "open"`,
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		got = append(got, e.Error())
		var refused *NotRestoredError
		if !errors.As(e, &refused) || !refused.Addr.IsValid() {
			t.Errorf("%v is not a NotRestoredError naming its address", e)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Restore errors:\n%q\nwant\n%q", got, want)
	}
	for svc, want := range map[string]int{"team-a/web": 1, "team-b/web": 0, "team-b/named": 1, "team-a/named": 0} {
		if got := a.Addresses(svc); len(got) != want {
			t.Errorf("%s holds %v, want %d addresses", svc, got, want)
		}
	}
}

// lockWatcher is a serviceSelector that records, each time the pool rules are checked,
// whether the allocator's lock is held.
type lockWatcher struct {
	labels.Selector
	a              *Allocator
	checks, locked int
}

func (w *lockWatcher) Matches(l labels.Labels) bool {
	w.checks++
	if w.a.mu.TryLock() {
		w.a.mu.Unlock()
	} else {
		w.locked++
	}
	return true
}

// TestRestoreBuildsOutsideTheLock checks that Restore checks every address while
// allocations can still take the lock: it holds the lock for the swap alone.
func TestRestoreBuildsOutsideTheLock(t *testing.T) {
	p := testPool(t, "p", "198.51.100.0/24")
	w := &lockWatcher{Selector: labels.Everything()}
	p.ServiceSelector = w
	a := New([]config.Pool{p})
	w.a = a
	var assignments []Assignment
	for i, addr := range addrs("198.51.100.1", "198.51.100.2", "198.51.100.3") {
		assignments = append(assignments, Assignment{Service: serviceNames(3)[i], Addresses: []netip.Addr{addr}})
	}
	if err := a.Restore(assignments); err != nil {
		t.Fatal(err)
	}
	if w.checks != 3 || w.locked != 0 {
		t.Errorf("pool rules checked %d times, %d of them under the lock; want 3, none under it", w.checks, w.locked)
	}
	if got := a.Addresses(serviceNames(3)[2]); len(got) != 1 {
		t.Errorf("restored %v", got)
	}
}
