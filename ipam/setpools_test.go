package ipam

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

func TestSetPoolsRemovesAPool(t *testing.T) {
	a := New([]config.Pool{
		testPool(t, "one", "198.51.100.0/30"),
		testPool(t, "two", "203.0.113.0/30"),
		testPool(t, "six", "2001:db8::/126"),
	})
	mustAssign(t, a, v4("ns/a"), "198.51.100.0")
	mustAssign(t, a, v4("ns/b"), "198.51.100.1")
	mustAssign(t, a, Request{Service: "ns/dual", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}}, "198.51.100.2", "2001:db8::")
	req := v4("ns/c")
	req.Pool = "two"
	mustAssign(t, a, req, "203.0.113.0")
	req.Service = "ns/d"
	mustAssign(t, a, req, "203.0.113.1")
	a.Release("ns/c") // a hole below the cursor of pool two, which must not outlive it

	dropped := a.SetPools([]config.Pool{testPool(t, "two", "203.0.113.0/30"), testPool(t, "six", "2001:db8::/126")})
	want := []Dropped{
		{"ns/a", netip.MustParseAddr("198.51.100.0")},
		{"ns/b", netip.MustParseAddr("198.51.100.1")},
		{"ns/dual", netip.MustParseAddr("198.51.100.2")},
	}
	if !slices.Equal(dropped, want) {
		t.Fatalf("dropped %v, want %v", dropped, want)
	}
	for svc, want := range map[string][]netip.Addr{
		"ns/a": nil, "ns/b": nil, "ns/dual": addrs("2001:db8::"), "ns/d": addrs("203.0.113.1"),
	} {
		if got := a.Addresses(svc); !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", svc, got, want)
		}
	}
	if h := a.Holders(netip.MustParseAddr("198.51.100.0")); h != nil {
		t.Errorf("a dropped address is still held by %v", h)
	}
	gotStats := statsSummary(a.Stats())
	if want := []string{"two IPv4 size 4 used 1 free 3", "six IPv6 size 4 used 1 free 3"}; !slices.Equal(gotStats, want) {
		t.Errorf("stats %q, want %q", gotStats, want)
	}

	// What the remaining pools still hold is stepped over, what they freed is handed out.
	for _, want := range []string{"203.0.113.0", "203.0.113.2", "203.0.113.3"} {
		mustAssign(t, a, v4("ns/new-"+want), want)
	}
	if _, err := a.Assign(v4("ns/full")); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError: pool two is full", err)
	}
	mustAssign(t, a, Request{Service: "ns/v6", Families: []iprange.Family{iprange.IPv6}}, "2001:db8::1")
	// The dual-stack Service gets an IPv4 address back only where a pool still offers one.
	mustAssign(t, a, Request{Service: "ns/dual", Families: []iprange.Family{iprange.IPv6}}, "2001:db8::")
}

func TestSetPoolsGrowsRenamesAndAvoids(t *testing.T) {
	a := New([]config.Pool{testPool(t, "small", "198.51.100.0/31")})
	mustAssign(t, a, v4("ns/a"), "198.51.100.0")
	mustAssign(t, a, v4("ns/b"), "198.51.100.1")
	if _, err := a.Assign(v4("ns/c")); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError", err)
	}

	// Grown, renamed, and now avoiding .0: ns/a keeps its .0, as Restore would keep it.
	bigger := testPool(t, "bigger", "198.51.100.0/29")
	bigger.AvoidBuggyIPs = true
	if dropped := a.SetPools([]config.Pool{bigger}); dropped != nil {
		t.Fatalf("dropped %v, want nothing", dropped)
	}
	req := v4("ns/c")
	req.Pool = "bigger"
	mustAssign(t, a, req, "198.51.100.2")
	mustAssign(t, a, v4("ns/a"), "198.51.100.0")
	req.Pool = "small"
	if _, err := a.Assign(req); !errors.As(err, new(*UnknownPoolError)) {
		t.Errorf("got %v, want UnknownPoolError for the old name", err)
	}
	if got := statsSummary(a.Stats()); !slices.Equal(got, []string{"bigger IPv4 size 7 used 3 free 4"}) {
		t.Errorf("stats %q", got)
	}

	// Shrunk: a Service outside the new range loses its address, the others keep theirs.
	dropped := a.SetPools([]config.Pool{testPool(t, "bigger", "198.51.100.1-198.51.100.2")})
	if want := []Dropped{{"ns/a", netip.MustParseAddr("198.51.100.0")}}; !slices.Equal(dropped, want) {
		t.Fatalf("dropped %v, want %v", dropped, want)
	}
	if _, err := a.Assign(v4("ns/a")); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError: both addresses are still held", err)
	}
}

func TestSetPoolsKeepsSharing(t *testing.T) {
	a := New([]config.Pool{testPool(t, "p", "198.51.100.0/30", "2001:db8::/126")})
	web := Request{Service: "ns/web", Families: []iprange.Family{iprange.IPv4}, SharingKey: "k", Ports: []Port{{"TCP", 80}}}
	dns := Request{Service: "ns/dns", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}, SharingKey: "k", Ports: []Port{{"UDP", 53}}}
	mustAssign(t, a, web, "198.51.100.0")
	mustAssign(t, a, dns, "198.51.100.0", "2001:db8::")
	mustAssign(t, a, v4("ns/other"), "198.51.100.1")

	if dropped := a.SetPools([]config.Pool{testPool(t, "q", "198.51.100.0/29", "2001:db8::/120")}); dropped != nil {
		t.Fatalf("dropped %v, want nothing", dropped)
	}
	if got := a.Holders(netip.MustParseAddr("198.51.100.0")); !slices.Equal(got, []string{"ns/web", "ns/dns"}) {
		t.Errorf("holders %v, want [ns/web ns/dns], the owner first", got)
	}
	// The sharing group is still there: a new sharer joins it, a port conflict is still one.
	https := Request{Service: "ns/https", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}, SharingKey: "k", Ports: []Port{{"TCP", 443}}}
	mustAssign(t, a, https, "198.51.100.0", "2001:db8::")
	clash := Request{Service: "ns/clash", Families: []iprange.Family{iprange.IPv4}, SharingKey: "k", Ports: []Port{{"TCP", 80}}}
	if _, err := a.Assign(clash); !errors.As(err, new(*PortConflictError)) {
		t.Errorf("got %v, want PortConflictError", err)
	}
	// The address counts once, and is freed by the last of its holders only.
	if got := statsSummary(a.Stats()); !slices.Equal(got, []string{"q IPv4 size 8 used 2 free 6", "q IPv6 size 256 used 1 free 255"}) {
		t.Errorf("stats %q", got)
	}
	a.Release("ns/web")
	a.Release("ns/dns")
	mustAssign(t, a, v4("ns/next"), "198.51.100.2")
	a.Release("ns/https")
	mustAssign(t, a, v4("ns/last"), "198.51.100.0")

	// A shared address that no pool holds any more is reported for each of its holders.
	mustAssign(t, a, Request{Service: "ns/s2", Families: []iprange.Family{iprange.IPv6}, SharingKey: "j", Ports: []Port{{"TCP", 2}}}, "2001:db8::")
	mustAssign(t, a, Request{Service: "ns/s1", Families: []iprange.Family{iprange.IPv6}, SharingKey: "j", Ports: []Port{{"TCP", 1}}}, "2001:db8::")
	dropped := a.SetPools([]config.Pool{testPool(t, "q", "198.51.100.0/29")})
	want := []Dropped{{"ns/s1", netip.MustParseAddr("2001:db8::")}, {"ns/s2", netip.MustParseAddr("2001:db8::")}}
	if !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
}

func TestSetPoolsCopiesPools(t *testing.T) {
	pools := []config.Pool{testPool(t, "p", "198.51.100.0/30")}
	a := New(nil)
	a.SetPools(pools)
	pools[0].Name = "changed"
	req := v4("ns/a")
	req.Pool = "p"
	mustAssign(t, a, req, "198.51.100.0")
}

func statsSummary(stats []Stats) []string {
	var out []string
	for _, st := range stats {
		out = append(out, fmt.Sprintf("%s %s size %v used %d free %v", st.Pool, st.Family, st.Size, st.Used, st.Free))
	}
	return out
}

// TestSetPoolsAgainstRestore builds random states, with sharing and dual-stack, changes the
// pools at random, and checks that SetPools leaves the allocator exactly as Restore of the
// surviving assignments does, then that both answer the same random requests alike.
func TestSetPoolsAgainstRestore(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	cycles := 0
	for trial := range 300 {
		a := New(randomPools(t, rnd))
		for range 60 {
			randomOp(rnd, a)
		}
		pools := randomPools(t, rnd)

		// The survivors, as the status of each Service would list them, before the change.
		contains := func(addr netip.Addr) bool {
			return slices.ContainsFunc(pools, func(p config.Pool) bool { return p.Contains(addr) })
		}
		var wantDropped []Dropped
		survivors := map[string]Assignment{}
		chains := map[netip.Addr][]string{}
		for _, svc := range slices.Sorted(maps.Keys(a.services)) {
			h := a.services[svc]
			as := Assignment{Service: svc}
			if h.share != nil {
				as.SharingKey, as.Ports = h.share.key, h.share.ports
			}
			for _, addr := range a.Addresses(svc) {
				if !contains(addr) {
					wantDropped = append(wantDropped, Dropped{svc, addr})
					continue
				}
				as.Addresses = append(as.Addresses, addr)
				chains[addr] = a.Holders(addr)
			}
			if len(as.Addresses) > 0 {
				survivors[svc] = as
			}
		}
		order, ok := holderOrder(chains)
		if !ok {
			cycles++
		}
		var assignments []Assignment
		for _, svc := range order {
			assignments = append(assignments, survivors[svc])
		}

		dropped := a.SetPools(pools)
		if !slices.Equal(dropped, wantDropped) {
			t.Fatalf("trial %d: dropped %v, want %v", trial, dropped, wantDropped)
		}
		b := New(pools)
		if err := b.Restore(assignments); err != nil {
			t.Fatalf("trial %d: Restore of the survivors: %v", trial, err)
		}
		for addr, chain := range chains {
			if got := a.Holders(addr); !slices.Equal(got, chain) {
				t.Fatalf("trial %d: holders of %s %v, were %v", trial, addr, got, chain)
			}
		}
		if got, want := snapshot(t, a, ok), snapshot(t, b, ok); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: after SetPools\n%+v\nafter Restore\n%+v", trial, got, want)
		}
		if !ok {
			continue // errors may name another first holder
		}
		for step := range 40 {
			seed := rnd.Uint64()
			if got, want := randomOp(rand.New(rand.NewPCG(seed, 0)), a), randomOp(rand.New(rand.NewPCG(seed, 0)), b); got != want {
				t.Fatalf("trial %d, step %d: after SetPools %s, after Restore %s", trial, step, got, want)
			}
		}
	}
	t.Logf("%d of 300 trials had holders that no Restore order can rebuild", cycles)
}

// holderOrder returns the Services in an order in which every address's holders come in
// the order of its chain, the one Restore needs to rebuild them; ok is false when there is
// none, and the order then breaks the cycles by name.
func holderOrder(chains map[netip.Addr][]string) (order []string, ok bool) {
	after := map[string][]string{}
	before := map[string]int{}
	for _, chain := range chains {
		for i, svc := range chain {
			if _, seen := before[svc]; !seen {
				before[svc] = 0
			}
			if i > 0 {
				after[chain[i-1]] = append(after[chain[i-1]], svc)
				before[svc]++
			}
		}
	}
	ok = true
	for len(before) > 0 {
		var ready []string
		for svc, n := range before {
			if n == 0 {
				ready = append(ready, svc)
			}
		}
		if len(ready) == 0 {
			ok = false
			ready = append(ready, slices.Sorted(maps.Keys(before))[0])
		}
		slices.Sort(ready)
		svc := ready[0]
		order = append(order, svc)
		delete(before, svc)
		for _, next := range after[svc] {
			if _, left := before[next]; left {
				before[next]--
			}
		}
	}
	return order, ok
}

type spanState struct {
	Pool       string
	Family     iprange.Family
	Size       string
	Used, Rng  int
	Cursor     netip.Addr
	Holes      []netip.Addr
	AvoidEdge  bool
	Ranges     []iprange.Range
	PoolConfig string
	Linked     bool // from the index and byName, and back to its pool
}

type allocatorState struct {
	Services map[string]string
	Holders  map[netip.Addr][]string
	Groups   map[groupKey]netip.Addr
	Spans    []spanState
}

// snapshot is everything the allocator holds, with each address's holders in their order
// if ordered, else sorted.
func snapshot(t *testing.T, a *Allocator, ordered bool) allocatorState {
	t.Helper()
	st := allocatorState{Services: map[string]string{}, Holders: map[netip.Addr][]string{}, Groups: a.groups}
	for svc, h := range a.services {
		st.Services[svc] = fmt.Sprintf("%v %+v", h.addrs, h.share)
		for _, addr := range h.addrs {
			if addr.IsValid() {
				holders := a.Holders(addr)
				if !ordered {
					slices.Sort(holders)
				}
				st.Holders[addr] = holders
			}
		}
	}
	if len(a.owners) != len(st.Holders) || len(a.sharers) > len(a.owners) {
		t.Fatalf("%d owners and %d shared addresses for %d held", len(a.owners), len(a.sharers), len(st.Holders))
	}
	for _, p := range a.pools {
		for f, s := range p.spans {
			if s == nil {
				continue
			}
			ss := spanState{Pool: p.cfg.Name, Family: iprange.Family(f), Size: s.size.String(), Used: s.used, Rng: s.rng,
				Cursor: s.cursor, AvoidEdge: s.avoidEdge, Ranges: s.ranges, PoolConfig: fmt.Sprintf("%+v", *p.cfg),
				Linked: slices.Contains(a.index, s) && a.byName[p.cfg.Name] == p && s.pool == p}
			s.holes.Ascend(func(h netip.Addr) bool { ss.Holes = append(ss.Holes, h); return true })
			st.Spans = append(st.Spans, ss)
		}
	}
	return st
}

// The addresses the random tests draw from: 32 IPv4 addresses across a .255/.0 edge, and
// 32 IPv6 ones, in blocks of 4 that random pools take or leave.
var (
	randomV4 = netip.MustParseAddr("10.0.0.240")
	randomV6 = netip.MustParseAddr("2001:db8::")
)

func randomAddr(rnd *rand.Rand) netip.Addr {
	a := randomV4
	if rnd.IntN(2) == 0 {
		a = randomV6
	}
	for range rnd.IntN(32) {
		a = a.Next()
	}
	return a
}

// randomPools deals the blocks to up to three pools, with names from a small set so that
// pools come, go and are renamed between two draws.
func randomPools(t *testing.T, rnd *rand.Rand) []config.Pool {
	names := []string{"a", "b", "c", "d"}
	rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	pools := make([]config.Pool, 1+rnd.IntN(3))
	for i := range pools {
		pools[i] = testPool(t, names[i])
		pools[i].AutoAssign = rnd.IntN(4) > 0
		pools[i].AvoidBuggyIPs = rnd.IntN(2) == 0
	}
	for _, start := range []netip.Addr{randomV4, randomV6} {
		first := start
		for range 8 {
			last := first
			for range 3 {
				last = last.Next()
			}
			if i := rnd.IntN(len(pools) + 1); i < len(pools) {
				pools[i].Ranges = append(pools[i].Ranges, iprange.Range{First: first, Last: last})
			}
			first = last.Next()
		}
	}
	return pools
}

// randomOp assigns or releases at random, and describes what happened.
func randomOp(rnd *rand.Rand, a *Allocator) string {
	svc := fmt.Sprint("s", rnd.IntN(16))
	if rnd.IntN(5) == 0 {
		return fmt.Sprint(a.Release(svc))
	}
	req := Request{Service: svc}
	switch rnd.IntN(4) {
	case 0:
		req.Families = []iprange.Family{iprange.IPv4}
	case 1:
		req.Families = []iprange.Family{iprange.IPv6}
	case 2:
		req.Families = []iprange.Family{iprange.IPv4, iprange.IPv6}
	default:
		req.Families = []iprange.Family{iprange.IPv6, iprange.IPv4}
	}
	if rnd.IntN(4) == 0 {
		req.Pool = []string{"a", "b", "c", "d"}[rnd.IntN(4)]
	}
	if rnd.IntN(2) == 0 {
		req.SharingKey = []string{"k", "j"}[rnd.IntN(2)]
		req.Ports = []Port{{"TCP", int32(rnd.IntN(4))}}
	}
	if rnd.IntN(4) == 0 {
		addr := randomAddr(rnd)
		if slices.Contains(req.Families, iprange.FamilyOf(addr)) {
			req.Addresses = []netip.Addr{addr}
		}
	}
	got, err := a.Assign(req)
	return fmt.Sprint(got, err)
}
