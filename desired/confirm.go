package desired

import (
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Digest returns the digest of the addresses, as the agent's replies carry it and as the
// ccm's requests carry the digest of what it expects.
func Digest(addrs []Address) probe.Digest {
	var d probe.Digest
	for _, a := range addrs {
		d = d.With(a.Addr)
	}
	return d
}

// Confirmed returns what an agent that cannot trust its own view announces: the
// addresses of the ccm's duty list that it holds, sorted. own is what its own view gives
// it; held what the Services its cache holds give it leave to announce (Held). An address
// the duty gives the node though a stale plan gives it to another node, or names the node
// nowhere, is announced, since the ccm decides from fresher plans; one of own the duty
// does not list is not. An address the node's cache does not hold at all has no pool or
// Services known here, and waits for the cache.
func Confirmed(own, held []Address, duty []netip.Addr) []Address {
	confirmed := make(map[netip.Addr]bool, len(duty))
	for _, a := range duty {
		confirmed[a.Unmap()] = true
	}
	mine := make(map[netip.Addr]Address, len(own))
	for _, a := range own {
		mine[a.Addr] = a
	}
	var out []Address
	for _, a := range held {
		if !confirmed[a.Addr] {
			continue
		}
		if m, ok := mine[a.Addr]; ok {
			a = m // with the nodes it stands in for
		} else {
			a.Covers = nil // the ccm's choice: this node stands in for no one it knows of
		}
		out = append(out, a)
	}
	return out
}

// Held returns every address of the Services the cache holds that the pools let node
// announce, sorted, each with its Services: the addresses a duty of the ccm may give it.
// Their plans are not asked: a cache that missed a move holds a plan written while this
// node was down, which names it nowhere, though the ccm's fresher plan makes it the
// announcer.
func Held(node string, nodeLabels labels.Set, requests []*annotation.Request, cfg *config.Config) []Address {
	byAddr := addresses{}
	for _, r := range requests {
		if !r.Ours() || node == "" {
			continue
		}
		for _, addr := range r.Ingress {
			if pool, reason := admit(addr, cfg, nodeLabels); reason == "" {
				byAddr.add(addr, pool, r.Service, nil)
			}
		}
	}
	return byAddr.sorted()
}

// Vacant returns whether an address has no live announcer by the cached plans: the plan
// that decides it names node itself, a node down, or nobody. down is the verdict the
// agent holds.
func Vacant(node string, requests []*annotation.Request, down Down) func(netip.Addr) bool {
	planner := planners(requests)
	return func(addr netip.Addr) bool {
		p := planner[addr]
		return p == nil || p.Announcer == node || down(p.Announcer)
	}
}

// Tolerated returns what an agent announces while its own view has differed from the
// ccm's duty for less than the tolerance: own, and the addresses the duty gives it that
// it holds and that are vacant, sorted, and those vacant ones apart. An address the cached plans give to a node the
// ccm took for down needs a new announcer now, and the ccm, which chose this node from
// fresher plans, says it is this one: waiting out the tolerance for a cache that may
// never catch up (a watch that hangs, an API server just stopped) would leave it
// unanswered. One whose cached announcer lives waits, since the cache may be ahead of the
// duty: on a planned move the old announcer sees the new plan before the ccm's next duty,
// and must not take the address back.
func Tolerated(own, held []Address, duty []netip.Addr, vacant func(netip.Addr) bool) (out, vacated []Address) {
	mine := make(map[netip.Addr]bool, len(own))
	for _, a := range own {
		mine[a.Addr] = true
	}
	for _, a := range Confirmed(own, held, duty) {
		if !mine[a.Addr] && vacant(a.Addr) {
			vacated = append(vacated, a)
		}
	}
	if len(vacated) == 0 {
		return own, nil
	}
	out = append(slices.Clone(own), vacated...)
	slices.SortFunc(out, func(a, b Address) int { return a.Addr.Compare(b.Addr) })
	return out, vacated
}
