package pick

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Slack is how far above its fair share a node's count of address groups may rise before
// rebalancing moves some away: a node holding more than Bound(share) is over the bound.
const Slack = 1.15

// Options say how Assign spreads the groups.
type Options struct {
	// Rebalance moves groups away from a node over its bound, to equal candidates under
	// theirs. Off, a group moves only when its announcer can no longer announce it, or a
	// better candidate (preferred, more endpoints) appears.
	Rebalance bool
	// Standbys is how many standbys each Ranking names after the announcer.
	Standbys int
}

// Ranking is Assign's choice for a group: the announcer then its standbys, in order, and
// why the announcer is first. Nodes is empty when none may announce.
type Ranking struct {
	Nodes  []string
	Reason Reason
	// Why says, for ReasonBalance, which loads moved the group, for people.
	Why string
}

// Bound is the most groups a node of fair share share may hold before it is over the
// bound: Slack times its share, but never less than the share rounded up, so that small
// shares can be met.
func Bound(share float64) int {
	return max(ceilShare(share), int(math.Floor(Slack*share+shareEpsilon)))
}

// shareEpsilon absorbs the rounding of summed fractions: fifty groups of 1/50 are 1.
const shareEpsilon = 1e-9

func ceilShare(s float64) int  { return int(math.Ceil(s - shareEpsilon)) }
func floorShare(s float64) int { return int(math.Floor(s + shareEpsilon)) }

// Assign decides every group at once, so that no node announces far more than its share:
// each group's announcer is the node Rank would pick among its equal candidates (same
// preference, same ready endpoints), except that a node at its bound takes no more, as in
// consistent hashing with bounded loads. A node's fair share is the sum, over the groups
// it is an equal best candidate of, of 1 over the number of such candidates.
//
// The current announcer keeps a group among equals (no failback) while it is not over
// its bound; with o.Rebalance, a node over it keeps only as many groups as the bound,
// taken in the order of their first addresses, and the rest go to the candidates under
// theirs. A group without an announcer goes to its first equal candidate in hash order
// under its share rounded down, else rounded up, else the least loaded. Standbys are
// chosen so that, were the announcer to fail, its groups would spread within the same
// bounds over the others. The result is keyed by FirstIP and depends on neither the
// order of groups nor of nodes: replicas of the ccm agree.
func Assign(groups []Group, nodes []Node, o Options) map[string]Ranking {
	s := newSpread(groups, nodes)
	s.announce(o.Rebalance)
	s.standbys(o.Standbys)
	out := make(map[string]Ranking, len(s.items))
	for i := range s.items {
		it := &s.items[i]
		r := Ranking{Reason: it.reason, Why: it.why}
		for _, n := range it.chosen {
			r.Nodes = append(r.Nodes, s.names[n])
		}
		out[it.g.FirstIP] = r
	}
	return out
}

// spread is Assign's working state. Nodes are indices into names, sorted by name.
type spread struct {
	names  []string
	hashes []uint64
	index  map[string]int32
	items  []item
	load   []int     // groups announced per node
	share  []float64 // fair share per node
	mark   []uint32  // mark[n] == epoch: n is excluded from the bulk tier being scanned
	epoch  uint32
	active int // nodes with a share
	// caps are, per node, its share rounded down, rounded up and its bound ([2]), now
	// ([0]) and once another node is gone ([1]).
	caps [2][3][]int
}

// item is one group being decided.
type item struct {
	g       *Group
	ipHash  uint64
	elig    *eligibility
	tiers   []tier // equal candidates, best first, as Rank orders them
	reason  Reason
	why     string
	chosen  []int32 // announcer, then standbys
	current int32   // the node keeping the group, or -1
	fixed   bool    // the announcer is decided whatever the loads
}

// tier is nodes Rank holds equal. A bulk tier is every eligible node not in another tier.
type tier struct {
	nodes []int32
	bulk  bool
}

// eligibility is the nodes eligible for every group of one set of pools.
type eligibility struct {
	nodes []int32
	is    []bool
}

func newSpread(groups []Group, nodes []Node) *spread {
	sorted := slices.SortedFunc(slices.Values(nodes), func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	nodes = slices.CompactFunc(sorted, func(a, b Node) bool { return a.Name == b.Name })
	s := &spread{index: make(map[string]int32, len(nodes)), load: make([]int, len(nodes)),
		share: make([]float64, len(nodes)), mark: make([]uint32, len(nodes))}
	for i, n := range nodes {
		s.names = append(s.names, n.Name)
		s.hashes = append(s.hashes, hash64(n.Name))
		s.index[n.Name] = int32(i)
	}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(groups[a].FirstIP, groups[b].FirstIP) })
	bySig := map[string]*eligibility{}
	s.items = make([]item, 0, len(groups))
	for _, gi := range order {
		g := &groups[gi]
		sig := poolSignature(g.Pools)
		e := bySig[sig]
		if e == nil {
			e = &eligibility{is: make([]bool, len(nodes))}
			for _, i := range able(*g, nodes) {
				e.nodes = append(e.nodes, int32(i))
				e.is[i] = true
			}
			bySig[sig] = e
		}
		s.items = append(s.items, s.newItem(g, e))
	}
	// Each group's best tier shares it out; summed in the groups' order, so the same.
	bulk := map[*eligibility]float64{}
	for i := range s.items {
		it := &s.items[i]
		if len(it.tiers) == 0 {
			continue
		}
		if t := it.tiers[0]; t.bulk {
			bulk[it.elig] += 1 / float64(len(it.elig.nodes))
		} else {
			for _, n := range t.nodes {
				s.share[n] += 1 / float64(len(t.nodes))
			}
		}
	}
	for _, sig := range slices.Sorted(maps.Keys(bySig)) {
		e := bySig[sig]
		for _, n := range e.nodes {
			s.share[n] += bulk[e]
		}
	}
	for _, sh := range s.share {
		if sh > 0 {
			s.active++
		}
	}
	for k, f := range []func(float64) int{floorShare, ceilShare, Bound} {
		for sc := range 2 {
			s.caps[sc][k] = make([]int, len(nodes))
			for n, sh := range s.share {
				if sc == 1 {
					sh = s.scenario(sh)
				}
				s.caps[sc][k][n] = f(sh)
			}
		}
	}
	return s
}

// newItem sorts g's candidates into tiers, as Rank orders them.
func (s *spread) newItem(g *Group, e *eligibility) item {
	it := item{g: g, ipHash: hash64(g.FirstIP), elig: e, current: -1}
	if len(e.nodes) == 0 {
		it.reason = ReasonNoEligibleNode
		return it
	}
	var first []int32
	if len(g.Local) > 0 {
		for name := range g.Local[0].Endpoints {
			if n, ok := s.index[name]; ok && e.is[n] && len(missingLocal(*g, name)) == 0 {
				first = append(first, n)
			}
		}
		if len(first) == 0 {
			it.reason = ReasonNoLocalEndpoints
			return it
		}
	} else {
		for name, c := range g.Endpoints {
			if n, ok := s.index[name]; ok && e.is[n] && c > 0 {
				first = append(first, n)
			}
		}
	}
	key := func(n int32) (int, int) { return preference(*g, s.names[n]), -g.Endpoints[s.names[n]] }
	slices.SortFunc(first, func(a, b int32) int {
		pa, ea := key(a)
		pb, eb := key(b)
		return cmp.Or(cmp.Compare(pa, pb), cmp.Compare(ea, eb), cmp.Compare(a, b))
	})
	for i, n := range first {
		if i > 0 {
			// Preferred nodes rank one by one; the others tie on their endpoints.
			p, ep := key(first[i-1])
			if q, eq := key(n); p == len(g.PreferredNodes) && p == q && ep == eq {
				last := &it.tiers[len(it.tiers)-1]
				last.nodes = append(last.nodes, n)
				continue
			}
		}
		it.tiers = append(it.tiers, tier{nodes: []int32{n}})
	}
	it.reason = ReasonEndpoints
	if len(g.Local) == 0 {
		// The eligible nodes without endpoints follow, preferred ones first, one each.
		for _, name := range g.PreferredNodes {
			if n, ok := s.index[name]; ok && e.is[n] && g.Endpoints[name] <= 0 && !slices.ContainsFunc(it.tiers, func(t tier) bool { return slices.Contains(t.nodes, n) }) {
				it.tiers = append(it.tiers, tier{nodes: []int32{n}})
			}
		}
		if len(first) == 0 {
			it.reason = ReasonNoEndpoints
		}
		it.tiers = append(it.tiers, tier{bulk: true})
	}
	return it
}

// poolSignature names the pools and families of a group: groups of equal signatures have
// the same eligible nodes.
func poolSignature(pools []PoolNodes) string {
	parts := make([]string, 0, len(pools))
	for _, p := range pools {
		parts = append(parts, fmt.Sprintf("%s/%t/%t", p.Pool, p.Families[iprange.IPv4], p.Families[iprange.IPv6]))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// hash64 is FNV-1a of s: stable across processes and versions, unlike maphash.
func hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// score is the tie-breaker between a node and an address, of their hash64s: lowest
// first. The finalizer of splitmix64 spreads the bits, so that the order of nodes for one
// address tells nothing of another's.
func score(node, ip uint64) uint64 {
	x := node ^ (ip * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
