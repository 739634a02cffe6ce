package pick

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// able returns the indices of the nodes that may announce g's addresses: those Eligible
// for every one of them, or, when there is none, those that can announce the most of its
// pools and families. A group whose IPv6 addresses no node can announce (every node lost
// its IPv6 address, or the pool's interface) keeps its IPv4 ones announced: one lost
// family must not take the other down with it. Nodes barred for another reason (down,
// draining, outside a pool's nodeSelector) are never taken.
func able(g Group, nodes []Node) []int {
	var full, most []int
	best, all := 0, len(families(g))
	for i, n := range nodes {
		if barred(g, n) != "" {
			continue
		}
		served := all - len(Unserved(g, n))
		switch {
		case served == all:
			full = append(full, i)
		case len(full) > 0 || served == 0 || served < best:
		case served > best:
			best, most = served, []int{i}
		default:
			most = append(most, i)
		}
	}
	if len(full) > 0 {
		return full
	}
	return most
}

// family is one family of one pool's addresses in a group.
type family struct {
	pool   string
	family iprange.Family
}

// families returns the pools and families of g's addresses, in g.Pools' order.
func families(g Group) []family {
	var out []family
	for _, p := range g.Pools {
		for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
			if p.Families[f] {
				out = append(out, family{p.Pool, f})
			}
		}
	}
	return out
}

// Unserved returns what n's agent says it cannot announce of g's addresses now, one
// entry per pool and family, in g.Pools' order: empty when it can announce them all. The
// announcer of a group no node can announce whole leaves these without an announcer.
func Unserved(g Group, n Node) []Unable {
	var out []Unable
	for _, f := range families(g) {
		for _, u := range n.Unable {
			if u.Pool == f.pool && u.Family == f.family {
				out = append(out, u)
				break
			}
		}
	}
	return out
}

// Unannounced says, for people, which of g's addresses node, its announcer, leaves
// without one, and why no node can announce them: "the IPv6 addresses of pool default:
// node-a has no IPv6 address on eth0, ...". It is "" when node announces them all.
func Unannounced(g Group, nodes []Node, node string) string {
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.Name == node })
	if i < 0 {
		return ""
	}
	var what, why []string
	for _, u := range Unserved(g, nodes[i]) {
		what = append(what, fmt.Sprintf("the %s addresses of pool %s", u.Family, u.Pool))
		for _, n := range nodes {
			if barred(g, n) != "" {
				continue
			}
			for _, v := range n.Unable {
				if v.Pool == u.Pool && v.Family == u.Family {
					why = append(why, v.Why)
				}
			}
		}
	}
	if len(what) == 0 {
		return ""
	}
	slices.Sort(why)
	return strings.Join(what, " and ") + ": " + few(slices.Compact(why))
}

// OnlyUnable reports whether some node is kept from announcing g by nothing but what its
// agent says it cannot announce (its Unable): when no node may announce g, it is then the
// nodes' links (no up interface, no address of the family) that leave g's addresses
// unannounced, not their states, labels or the pools' nodeSelectors.
func OnlyUnable(g Group, nodes []Node) bool {
	for _, n := range nodes {
		if barred(g, n) == "" && len(Unserved(g, n)) > 0 {
			return true
		}
	}
	return false
}
