package servicewatch

import (
	"net/netip"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
)

// TestKeepLingers sees a draining node keep the addresses that moved away as lingering
// (answered, never announced again), and those it still holds, or gains, as its own.
func TestKeepLingers(t *testing.T) {
	a := func(s string) desired.Address { return desired.Address{Addr: netip.MustParseAddr(s)} }
	was := []desired.Address{a("198.18.0.1"), a("198.18.0.2")}
	now := []desired.Address{a("198.18.0.2"), a("198.18.0.3")}
	got := keep(was, now)
	want := map[string]bool{"198.18.0.1": true, "198.18.0.2": false, "198.18.0.3": false}
	if len(got) != len(want) {
		t.Fatalf("keep gave %d addresses, want %d: %+v", len(got), len(want), got)
	}
	for _, g := range got {
		lingering, ok := want[g.Addr.String()]
		if !ok || g.Lingering != lingering {
			t.Errorf("%s: lingering %v, want %v (known %v)", g.Addr, g.Lingering, lingering, ok)
		}
	}
}
