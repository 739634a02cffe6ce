package servicewatch

import (
	"net/netip"
	"slices"
	"testing"
	"time"

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

// TestLingerSet checks the linger of a drained node: an address that left is answered
// (lingering, covering no one) for the bound and no longer, whether the Node was seen
// drained before or just after the address left; one that comes back is the node's own
// again; a node not drained lets every address go at once.
func TestLingerSet(t *testing.T) {
	a := func(s string, covers ...string) desired.Address {
		return desired.Address{Addr: netip.MustParseAddr(s), Covers: covers}
	}
	const bound = time.Second
	t0 := time.Unix(1000, 0)
	type entry struct {
		addr      string
		lingering bool
	}
	check := func(t *testing.T, what string, got []desired.Address, want ...entry) {
		t.Helper()
		var g []entry
		for _, x := range got {
			g = append(g, entry{x.Addr.String(), x.Lingering})
			if x.Lingering && len(x.Covers) > 0 {
				t.Errorf("%s: lingering %s covers %v, want no one", what, x.Addr, x.Covers)
			}
		}
		if !slices.Equal(g, want) {
			t.Errorf("%s: got %v, want %v", what, g, want)
		}
	}

	t.Run("drained: answered for the bound", func(t *testing.T) {
		l := lingerSet{bound: bound}
		was := []desired.Address{a("198.18.0.1", "node-x"), a("198.18.0.2")}
		out, next := l.apply(was, []desired.Address{a("198.18.0.2")}, true, t0)
		check(t, "at the move", out, entry{"198.18.0.1", true}, entry{"198.18.0.2", false})
		if !next.Equal(t0.Add(bound)) {
			t.Errorf("next %v, want %v", next, t0.Add(bound))
		}
		out, _ = l.apply(out, []desired.Address{a("198.18.0.2")}, true, t0.Add(bound-time.Millisecond))
		check(t, "just before the bound", out, entry{"198.18.0.1", true}, entry{"198.18.0.2", false})
		out, next = l.apply(out, []desired.Address{a("198.18.0.2")}, true, t0.Add(bound))
		check(t, "at the bound", out, entry{"198.18.0.2", false})
		if !next.IsZero() {
			t.Errorf("next %v with nothing lingering, want zero", next)
		}
		// What the speaker was given lingering is not armed again.
		out, _ = l.apply([]desired.Address{{Addr: netip.MustParseAddr("198.18.0.1"), Lingering: true}}, nil, true, t0.Add(bound+time.Millisecond))
		check(t, "after the bound", out)
	})
	t.Run("not drained: let go at once", func(t *testing.T) {
		l := lingerSet{bound: bound}
		out, next := l.apply([]desired.Address{a("198.18.0.1")}, nil, false, t0)
		check(t, "at the move", out)
		if !next.IsZero() {
			t.Errorf("next %v, want zero", next)
		}
	})
	t.Run("the plan came before the drain annotation", func(t *testing.T) {
		l := lingerSet{bound: bound}
		out, _ := l.apply([]desired.Address{a("198.18.0.1")}, nil, false, t0)
		check(t, "at the move", out)
		out, next := l.apply(out, nil, true, t0.Add(10*time.Millisecond))
		check(t, "drained just after", out, entry{"198.18.0.1", true})
		if !next.Equal(t0.Add(bound)) {
			t.Errorf("next %v, want the bound from the move, %v", next, t0.Add(bound))
		}
	})
	t.Run("an address that comes back is the node's own", func(t *testing.T) {
		l := lingerSet{bound: bound}
		out, _ := l.apply([]desired.Address{a("198.18.0.1")}, nil, true, t0)
		check(t, "at the move", out, entry{"198.18.0.1", true})
		out, _ = l.apply(out, []desired.Address{a("198.18.0.1")}, true, t0.Add(100*time.Millisecond))
		check(t, "back", out, entry{"198.18.0.1", false})
		out, _ = l.apply(out, nil, true, t0.Add(200*time.Millisecond))
		check(t, "left again", out, entry{"198.18.0.1", true})
	})
}
