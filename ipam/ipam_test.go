package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// testPool builds a pool open to every Service, with autoAssign on.
func testPool(t testing.TB, name string, addresses ...string) config.Pool {
	t.Helper()
	p := config.Pool{Name: name, AutoAssign: true, ServiceSelector: labels.Everything(), NodeSelector: labels.Everything()}
	for _, s := range addresses {
		r, err := iprange.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	return p
}

func v4(service string) Request {
	return Request{Service: service, Namespace: "default", Families: []iprange.Family{iprange.IPv4}}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func mustAssign(t *testing.T, a *Allocator, req Request, want ...string) {
	t.Helper()
	got, err := a.Assign(req)
	if err != nil {
		t.Fatalf("Assign(%s): %v", req.Service, err)
	}
	if !slices.Equal(got, addrs(want...)) {
		t.Fatalf("Assign(%s) = %v, want %v", req.Service, got, want)
	}
}

func TestLowestFreeAcrossRanges(t *testing.T) {
	// Ranges are written out of order; allocation still goes lowest first.
	a := New([]config.Pool{testPool(t, "p", "198.51.100.20-198.51.100.21", "198.51.100.2/31")})
	for i, want := range []string{"198.51.100.2", "198.51.100.3", "198.51.100.20", "198.51.100.21"} {
		mustAssign(t, a, v4(fmt.Sprint("svc-", i)), want)
	}
	_, err := a.Assign(v4("svc-4"))
	var exhausted *ExhaustedError
	if !errors.As(err, &exhausted) || exhausted.Family != iprange.IPv4 {
		t.Fatalf("fifth Assign: got %v, want ExhaustedError for IPv4", err)
	}
	if got, want := err.Error(), "every auto-assign pool open to this Service has run out of IPv4 addresses"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	// A released address is the lowest free one again.
	a.Release("svc-1")
	mustAssign(t, a, v4("svc-5"), "198.51.100.3")
}

func TestAvoidBuggyIPs(t *testing.T) {
	p := testPool(t, "p", "10.0.0.254-10.0.1.1")
	p.AvoidBuggyIPs = true
	a := New([]config.Pool{p})
	mustAssign(t, a, v4("a"), "10.0.0.254")
	mustAssign(t, a, v4("b"), "10.0.1.1")
	if _, err := a.Assign(v4("c")); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError: .255 and .0 must not be handed out", err)
	}
	st := a.Stats()[0]
	if st.Size.Int64() != 2 || st.Used != 2 || st.Free.Sign() != 0 {
		t.Errorf("stats = size %v used %d free %v, want 2 2 0", st.Size, st.Used, st.Free)
	}
	// Asked for by name, an edge address may still be held, but is never reused on its own.
	mustAssign(t, a, Request{Service: "d", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("10.0.0.255")}, "10.0.0.255")
	a.Release("d")
	if _, err := a.Assign(v4("e")); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError after releasing an edge address", err)
	}
}

func TestIPv6(t *testing.T) {
	a := New([]config.Pool{testPool(t, "p", "2001:db8::/48", "198.51.100.0/24")})
	req := Request{Service: "a", Families: []iprange.Family{iprange.IPv6}}
	mustAssign(t, a, req, "2001:db8::")
	req.Service = "b"
	mustAssign(t, a, req, "2001:db8::1")
	for _, st := range a.Stats() {
		if st.Family != iprange.IPv6 {
			continue
		}
		size := new(big.Int).Lsh(big.NewInt(1), 80)
		if st.Size.Cmp(size) != 0 || st.Used != 2 || st.Free.Cmp(size.Sub(size, big.NewInt(2))) != 0 {
			t.Errorf("IPv6 stats = %v/%d/%v, want exact 2^80, 2, 2^80-2", st.Size, st.Used, st.Free)
		}
	}
}

func TestRefusals(t *testing.T) {
	open := testPool(t, "open", "198.51.100.0/30")
	teamOnly := testPool(t, "team", "203.0.113.0/30", "2001:db8:1::/64")
	teamOnly.Namespaces = []string{"team"}
	selected := testPool(t, "public", "192.0.2.0/30")
	selected.AutoAssign = false
	selected.ServiceSelector = labels.SelectorFromSet(labels.Set{"tier": "public"})
	a := New([]config.Pool{open, teamOnly, selected})
	mustAssign(t, a, v4("default/holder"), "198.51.100.0")

	tests := []struct {
		name string
		req  Request
		want error
		msg  string
	}{{
		name: "unknown pool",
		req:  Request{Service: "default/x", Namespace: "default", Pool: "nope", Families: []iprange.Family{iprange.IPv4}},
		want: &UnknownPoolError{Pool: "nope"},
		msg:  `pool "nope" is not defined in the cloud-config`,
	}, {
		name: "pool not allowed for namespace",
		req:  Request{Service: "default/x", Namespace: "default", Pool: "team", Families: []iprange.Family{iprange.IPv4}},
		want: &NotAllowedError{Pool: "team", Namespace: "default"},
		msg:  `pool "team" does not allow Services in namespace "default" with these labels (see its namespaces and serviceSelector)`,
	}, {
		name: "pool not allowed by selector",
		req:  Request{Service: "default/x", Namespace: "default", Labels: labels.Set{"tier": "internal"}, Pool: "public", Families: []iprange.Family{iprange.IPv4}},
		want: &NotAllowedError{Pool: "public", Namespace: "default"},
		msg:  `pool "public" does not allow Services in namespace "default" with these labels (see its namespaces and serviceSelector)`,
	}, {
		name: "requested address in a pool that does not admit the Service",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("203.0.113.1")},
		want: &NotAllowedError{Pool: "team", Namespace: "default"},
		msg:  `pool "team" does not allow Services in namespace "default" with these labels (see its namespaces and serviceSelector)`,
	}, {
		name: "family not offered by named pool",
		req:  Request{Service: "default/x", Namespace: "default", Pool: "open", Families: []iprange.Family{iprange.IPv6}},
		want: &FamilyNotOfferedError{Pool: "open", Family: iprange.IPv6},
		msg:  `pool "open" has no IPv6 addresses`,
	}, {
		name: "family not offered by any auto-assign pool open to the Service",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv6}},
		want: &FamilyNotOfferedError{Family: iprange.IPv6},
		msg:  `no auto-assign pool open to this Service has IPv6 addresses`,
	}, {
		name: "address outside every pool",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("10.1.2.3")},
		want: &NotInPoolError{Addr: netip.MustParseAddr("10.1.2.3")},
		msg:  `address 10.1.2.3 is not in any pool of the cloud-config`,
	}, {
		name: "address outside the named pool",
		req:  Request{Service: "default/x", Namespace: "default", Pool: "open", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("192.0.2.1")},
		want: &NotInPoolError{Addr: netip.MustParseAddr("192.0.2.1"), Pool: "open"},
		msg:  `address 192.0.2.1 is not in pool "open"`,
	}, {
		name: "address in use",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("198.51.100.0")},
		want: &InUseError{Addr: netip.MustParseAddr("198.51.100.0"), Holder: "default/holder"},
		msg:  `address 198.51.100.0 is already assigned to default/holder`,
	}, {
		name: "address of a family the Service does not have",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("2001:db8:1::1")},
		want: &InvalidRequestError{Reason: "address 2001:db8:1::1 requested, but the Service has no IPv6 family"},
		msg:  `invalid request: address 2001:db8:1::1 requested, but the Service has no IPv6 family`,
	}, {
		name: "two addresses of one family",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("198.51.100.1", "198.51.100.2")},
		want: &InvalidRequestError{Reason: "more than one IPv4 address requested"},
		msg:  `invalid request: more than one IPv4 address requested`,
	}, {
		name: "address with a zone",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv6}, Addresses: addrs("fe80::1%eth0")},
		want: &InvalidRequestError{Reason: "fe80::1%eth0 has a zone: a Service address cannot"},
		msg:  `invalid request: fe80::1%eth0 has a zone: a Service address cannot`,
	}, {
		name: "IPv4-mapped IPv6 address",
		req:  Request{Service: "default/x", Namespace: "default", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}, Addresses: addrs("::ffff:198.51.100.1")},
		want: &InvalidRequestError{Reason: "::ffff:198.51.100.1 is IPv4-mapped IPv6, write it as 198.51.100.1"},
		msg:  `invalid request: ::ffff:198.51.100.1 is IPv4-mapped IPv6, write it as 198.51.100.1`,
	}, {
		name: "no families",
		req:  Request{Service: "default/x", Namespace: "default"},
		want: &InvalidRequestError{Reason: "families []: want one or two different families"},
		msg:  `invalid request: families []: want one or two different families`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.Assign(tc.req)
			if err == nil {
				t.Fatalf("Assign = %v, want error %v", got, tc.want)
			}
			if fmt.Sprintf("%#v", err) != fmt.Sprintf("%#v", tc.want) {
				t.Errorf("error = %#v, want %#v", err, tc.want)
			}
			if err.Error() != tc.msg {
				t.Errorf("message = %q, want %q", err.Error(), tc.msg)
			}
		})
	}
	if used := a.Stats()[0].Used; used != 1 {
		t.Errorf("refused requests changed the pool: used = %d, want 1", used)
	}
}

func TestNamedPoolExhausted(t *testing.T) {
	a := New([]config.Pool{testPool(t, "small", "198.51.100.7/32"), testPool(t, "big", "198.51.100.8/29")})
	req := v4("a")
	req.Pool = "small"
	mustAssign(t, a, req, "198.51.100.7")
	req.Service = "b"
	_, err := a.Assign(req)
	if want := "pool \"small\" has no free IPv4 address"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	// Without a pool, the next auto-assign pool in config order serves.
	mustAssign(t, a, v4("c"), "198.51.100.8")
}

func TestAutoAssignOffIsOnlyUsedWhenNamed(t *testing.T) {
	manual := testPool(t, "manual", "192.0.2.0/31")
	manual.AutoAssign = false
	a := New([]config.Pool{manual, testPool(t, "auto", "198.51.100.0/31")})
	mustAssign(t, a, v4("a"), "198.51.100.0")
	req := v4("b")
	req.Pool = "manual"
	mustAssign(t, a, req, "192.0.2.0")
	mustAssign(t, a, Request{Service: "c", Families: []iprange.Family{iprange.IPv4}, Addresses: addrs("192.0.2.1")}, "192.0.2.1")
}

func TestDualStack(t *testing.T) {
	a := New([]config.Pool{testPool(t, "p", "198.51.100.0/31", "2001:db8::/127")})
	mustAssign(t, a, Request{Service: "a", Families: []iprange.Family{iprange.IPv6, iprange.IPv4}}, "2001:db8::", "198.51.100.0")
	mustAssign(t, a, Request{Service: "b", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}}, "198.51.100.1", "2001:db8::1")
	mustAssign(t, a, Request{Service: "a", Families: []iprange.Family{iprange.IPv6, iprange.IPv4}}, "2001:db8::", "198.51.100.0")
	a.Release("b")

	// IPv6 runs out: the IPv4 address taken first must go back.
	mustAssign(t, a, Request{Service: "c", Families: []iprange.Family{iprange.IPv6}}, "2001:db8::1")
	if _, err := a.Assign(Request{Service: "d", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}}); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("got %v, want ExhaustedError", err)
	}
	if got := a.Addresses("d"); got != nil {
		t.Errorf("failed request left d with %v", got)
	}
	mustAssign(t, a, v4("e"), "198.51.100.1")
}

func TestIdempotentAndMoves(t *testing.T) {
	a := New([]config.Pool{testPool(t, "one", "198.51.100.0/30"), testPool(t, "two", "203.0.113.0/30")})
	mustAssign(t, a, v4("a"), "198.51.100.0")
	before := a.services["a"]
	mustAssign(t, a, v4("a"), "198.51.100.0")
	if a.services["a"] != before {
		t.Error("assigning the same request again replaced the holder")
	}

	// Moving to another pool takes the new address and frees the old one.
	req := v4("a")
	req.Pool = "two"
	mustAssign(t, a, req, "203.0.113.0")
	mustAssign(t, a, v4("b"), "198.51.100.0")

	// Moving to an exact address.
	req.Addresses = addrs("203.0.113.3")
	mustAssign(t, a, req, "203.0.113.3")
	if h := a.Holders(netip.MustParseAddr("203.0.113.0")); h != nil {
		t.Errorf("old address still held by %v", h)
	}

	// A refused move keeps the address the Service had.
	req.Addresses = addrs("198.51.100.0")
	req.Pool = ""
	if _, err := a.Assign(req); !errors.As(err, new(*InUseError)) {
		t.Fatalf("got %v, want InUseError", err)
	}
	if got := a.Addresses("a"); !slices.Equal(got, addrs("203.0.113.3")) {
		t.Errorf("after a refused move a holds %v, want 203.0.113.3", got)
	}

	// Dropping the exact address keeps the current one: it still satisfies the request.
	req.Addresses = nil
	mustAssign(t, a, req, "203.0.113.3")

	if !a.Release("a") || a.Release("a") {
		t.Error("Release should report true once, then false")
	}
}

func TestSharing(t *testing.T) {
	a := New([]config.Pool{testPool(t, "p", "198.51.100.0/30", "2001:db8::/126")})
	web := Request{Service: "ns/web", Families: []iprange.Family{iprange.IPv4}, SharingKey: "k", Ports: []Port{{"TCP", 80}}}
	dns := Request{Service: "ns/dns", Families: []iprange.Family{iprange.IPv4, iprange.IPv6}, SharingKey: "k", Ports: []Port{{"UDP", 53}, {"TCP", 53}}}
	mustAssign(t, a, web, "198.51.100.0")
	mustAssign(t, a, dns, "198.51.100.0", "2001:db8::")

	other := Request{Service: "ns/other", Families: []iprange.Family{iprange.IPv4}, SharingKey: "k", Ports: []Port{{"TCP", 8080}, {"TCP", 80}}}
	_, err := a.Assign(other)
	if want := "cannot share address 198.51.100.0: ns/web already uses port 80/TCP"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	other.SharingKey = "another"
	mustAssign(t, a, other, "198.51.100.1")
	// Asking for the shared address with another key is refused, naming the first holder.
	other.Addresses = addrs("198.51.100.0")
	if _, err := a.Assign(other); err == nil || err.Error() != "address 198.51.100.0 is already assigned to ns/web" {
		t.Fatalf("got %v", err)
	}
	// Asking for another address than the group's is refused.
	dns.Addresses = addrs("198.51.100.3")
	if _, err := a.Assign(dns); err == nil || err.Error() != `address 198.51.100.3 was requested, but Services with sharing key "k" already use 198.51.100.0` {
		t.Fatalf("got %v", err)
	}
	dns.Addresses = nil

	// The address stays while any sharer holds it; the last one frees it.
	a.Release("ns/web")
	if got := a.Holders(netip.MustParseAddr("198.51.100.0")); !slices.Equal(got, []string{"ns/dns"}) {
		t.Fatalf("holders = %v, want [ns/dns]", got)
	}
	web.Ports = []Port{{"TCP", 443}}
	mustAssign(t, a, web, "198.51.100.0")
	a.Release("ns/web")
	a.Release("ns/dns")
	mustAssign(t, a, v4("x"), "198.51.100.0")

	// A lone Service may change its sharing key and keep its address; the old key is free.
	lone := Request{Service: "ns/lone", Families: []iprange.Family{iprange.IPv6}, SharingKey: "old"}
	mustAssign(t, a, lone, "2001:db8::")
	lone.SharingKey = "new"
	mustAssign(t, a, lone, "2001:db8::")
	mustAssign(t, a, Request{Service: "ns/next", Families: []iprange.Family{iprange.IPv6}, SharingKey: "old"}, "2001:db8::1")
	mustAssign(t, a, Request{Service: "ns/peer", Families: []iprange.Family{iprange.IPv6}, SharingKey: "new", Ports: []Port{{"TCP", 1}}}, "2001:db8::")
}

func TestRestore(t *testing.T) {
	a := New([]config.Pool{testPool(t, "p", "198.51.100.0/29")})
	mustAssign(t, a, v4("stale"), "198.51.100.0")
	err := a.Restore([]Assignment{
		{Service: "ns/a", Addresses: addrs("198.51.100.1")},
		{Service: "ns/b", Addresses: addrs("198.51.100.1")},
		{Service: "ns/c", Addresses: addrs("198.51.100.3", "2001:db8::9")},
		{Service: "ns/s1", Addresses: addrs("198.51.100.4"), SharingKey: "k", Ports: []Port{{"TCP", 80}}},
		{Service: "ns/s2", Addresses: addrs("198.51.100.4"), SharingKey: "k", Ports: []Port{{"TCP", 443}}},
		{Service: "ns/s3", Addresses: addrs("198.51.100.4"), SharingKey: "k", Ports: []Port{{"TCP", 443}}},
		{Service: "ns/a", Addresses: addrs("198.51.100.5")},
		{Service: "ns/d", Addresses: addrs("198.51.100.6", "198.51.100.7")},
	})
	want := []string{
		"ns/b claims address 198.51.100.1, which ns/a already holds: address 198.51.100.1 is already assigned to ns/a",
		"ns/c: address 2001:db8::9 is not in any pool of the cloud-config",
		"ns/s3 claims address 198.51.100.4, which ns/s1 already holds: cannot share address 198.51.100.4: ns/s2 already uses port 443/TCP",
		"ns/a: invalid request: listed more than once",
		"ns/d: invalid request: holds both 198.51.100.6 and 198.51.100.7",
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		got = append(got, e.Error())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Restore errors:\n%q\nwant\n%q", got, want)
	}
	var dup *DuplicateError
	if !errors.As(err, &dup) || dup.Holder != "ns/a" || dup.Service != "ns/b" || !errors.As(dup, new(*InUseError)) {
		t.Errorf("errors.As DuplicateError = %+v", dup)
	}
	if a.Addresses("stale") != nil {
		t.Error("Restore kept state from before it")
	}
	if a.Addresses("ns/b") != nil {
		t.Error("the losing duplicate was restored")
	}
	// Allocation now steps over everything restored.
	for _, want := range []string{"198.51.100.0", "198.51.100.2", "198.51.100.5", "198.51.100.7"} {
		mustAssign(t, a, v4("new-"+want), want)
	}
	if got := a.Holders(netip.MustParseAddr("198.51.100.4")); !slices.Equal(got, []string{"ns/s1", "ns/s2"}) {
		t.Errorf("shared holders = %v", got)
	}
}

// TestAgainstModel runs random requests and releases against a small pool and compares
// every answer with a model that enumerates the pool.
func TestAgainstModel(t *testing.T) {
	p := testPool(t, "p", "10.0.1.250-10.0.2.5", "10.0.0.0/29", "10.0.3.0/30")
	p.AvoidBuggyIPs = true
	model := map[netip.Addr]string{}
	var all []netip.Addr
	for _, r := range p.Ranges {
		for x := r.First; x.Compare(r.Last) <= 0; x = x.Next() {
			if b := x.As4()[3]; b != 0 && b != 255 {
				all = append(all, x)
			}
		}
	}
	slices.SortFunc(all, netip.Addr.Compare)
	a := New([]config.Pool{p})
	rnd := rand.New(rand.NewPCG(1, 2))
	for step := range 20000 {
		svc := fmt.Sprint("s", rnd.IntN(30))
		switch op := rnd.IntN(10); {
		case op < 3:
			a.Release(svc)
			for addr, h := range model {
				if h == svc {
					delete(model, addr)
				}
			}
		case op < 5:
			want := all[rnd.IntN(len(all))]
			got, err := a.Assign(Request{Service: svc, Families: []iprange.Family{iprange.IPv4}, Addresses: []netip.Addr{want}})
			if h, ok := model[want]; ok && h != svc {
				if err == nil {
					t.Fatalf("step %d: %s got %v held by %s", step, svc, got, h)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for addr, h := range model {
				if h == svc {
					delete(model, addr)
				}
			}
			model[want] = svc
		default:
			var lowest netip.Addr
			var mine netip.Addr
			for _, x := range all {
				if h, ok := model[x]; !ok && !lowest.IsValid() {
					lowest = x
				} else if ok && h == svc {
					mine = x
				}
			}
			got, err := a.Assign(v4(svc))
			want := mine
			if !want.IsValid() {
				want = lowest
			}
			if !want.IsValid() {
				if !errors.As(err, new(*ExhaustedError)) {
					t.Fatalf("step %d: got %v %v, want exhausted", step, got, err)
				}
				continue
			}
			if err != nil || got[0] != want {
				t.Fatalf("step %d: %s got %v %v, want %v", step, svc, got, err, want)
			}
			model[want] = svc
		}
		if st := a.Stats()[0]; st.Used != len(model) || st.Size.Int64() != int64(len(all)) {
			t.Fatalf("step %d: stats used %d size %v, model %d of %d", step, st.Used, st.Size, len(model), len(all))
		}
	}
}

func TestConcurrentAssign(t *testing.T) {
	const n = 512
	a := New([]config.Pool{testPool(t, "p", "10.0.0.0/23", "2001:db8::/64")})
	var wg sync.WaitGroup
	results := make([][]netip.Addr, n+1)
	for i := range n + 1 {
		wg.Go(func() {
			got, err := a.Assign(Request{Service: fmt.Sprint("s", i), Families: []iprange.Family{iprange.IPv4, iprange.IPv6}})
			if err == nil {
				results[i] = got
			} else if !errors.As(err, new(*ExhaustedError)) {
				t.Errorf("s%d: %v", i, err)
			}
			if i%7 == 0 {
				a.Stats()
			}
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	failed := 0
	for i, r := range results {
		if r == nil {
			failed++
			continue
		}
		for _, addr := range r {
			if j, dup := seen[addr]; dup {
				t.Fatalf("%v given to s%d and s%d", addr, j, i)
			}
			seen[addr] = i
		}
	}
	if failed != 1 {
		t.Errorf("%d requests failed, want exactly 1 (512 IPv4 addresses for 513 Services)", failed)
	}
}
