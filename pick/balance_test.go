package pick

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// equalCluster returns services groups without endpoints and nodes equal nodes.
func equalCluster(services, nodes int) ([]Group, []Node) {
	groups := make([]Group, services)
	for i := range groups {
		groups[i] = Group{FirstIP: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)}
	}
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
	}
	return groups, healthy(names...)
}

// announcers returns the announcer of each group, by FirstIP.
func announcers(r map[string]Ranking) map[string]string {
	out := map[string]string{}
	for ip, rk := range r {
		if len(rk.Nodes) > 0 {
			out[ip] = rk.Nodes[0]
		}
	}
	return out
}

// loads counts the groups each node announces, every node of nodes included.
func loads(a map[string]string, nodes []Node) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n.Name] = 0
	}
	for _, n := range a {
		out[n]++
	}
	return out
}

// spreadOf returns the most and the fewest groups a node announces over the mean.
func spreadOf(a map[string]string, nodes []Node) (maxRatio, minRatio float64) {
	l := slices.Collect(maps.Values(loads(a, nodes)))
	mean := float64(len(a)) / float64(len(nodes))
	return float64(slices.Max(l)) / mean, float64(slices.Min(l)) / mean
}

// decided returns groups as the ccm gives them once r is published: each with its
// announcer as Current and r's order as Plan.
func decided(groups []Group, r map[string]Ranking) []Group {
	out := slices.Clone(groups)
	for i := range out {
		rk := r[out[i].FirstIP]
		out[i].Current, out[i].Plan = first(rk.Nodes), rk.Nodes
	}
	return out
}

// moves counts the groups whose announcer differs between a and b, and those of them
// whose announcer in a is not from.
func moves(a, b map[string]string, from string) (all, others int) {
	for ip, n := range a {
		if b[ip] != n {
			all++
			if n != from {
				others++
			}
		}
	}
	return all, others
}

var sizes = []struct{ services, nodes int }{{100, 10}, {1000, 50}, {5000, 100}, {300, 3}}

var defaults = Options{Rebalance: true, Standbys: 2}

// TestAssignSpread checks the bound among equal nodes: no node announces more than Slack
// times the mean, or fewer than 2-Slack times it, within one group.
func TestAssignSpread(t *testing.T) {
	for _, size := range sizes {
		groups, nodes := equalCluster(size.services, size.nodes)
		a := announcers(Assign(groups, nodes, defaults))
		if len(a) != size.services {
			t.Fatalf("%d/%d: %d groups have an announcer", size.services, size.nodes, len(a))
		}
		mean := float64(size.services) / float64(size.nodes)
		l := loads(a, nodes)
		hi, lo := slices.Max(slices.Collect(maps.Values(l))), slices.Min(slices.Collect(maps.Values(l)))
		t.Logf("%d Services on %d nodes: busiest %d (%.2f× the mean), idlest %d (%.2f×)", size.services, size.nodes, hi, float64(hi)/mean, lo, float64(lo)/mean)
		if float64(hi) > Slack*mean+1 || float64(lo) < (2-Slack)*mean-1 {
			t.Errorf("%d Services on %d nodes: busiest %d, idlest %d; mean %.1f", size.services, size.nodes, hi, lo, mean)
		}
	}
}

// TestAssignMoves checks what moves when a node leaves (only its groups, each to a node
// under its bound) and when one joins (nothing among many nodes; with few, only enough to
// bring every node under its bound, all to the new node), with rebalancing and without.
func TestAssignMoves(t *testing.T) {
	for _, size := range sizes {
		groups, nodes := equalCluster(size.services, size.nodes)
		r := Assign(groups, nodes, defaults)
		before := announcers(r)
		groups = decided(groups, r)

		gone := nodes[size.nodes/2].Name
		left := without(nodes, gone)
		after := announcers(Assign(groups, left, defaults))
		all, others := moves(before, after, gone)
		if want := loads(before, nodes)[gone]; all != want || others != 0 {
			t.Errorf("%d/%d: %s left: %d moved, %d of them from other nodes; want %d, 0", size.services, size.nodes, gone, all, others, want)
		}
		bound := Bound(float64(size.services) / float64(len(left)))
		for n, l := range loads(after, left) {
			if l > bound {
				t.Errorf("%d/%d: %s left: %s holds %d, over the bound %d", size.services, size.nodes, gone, n, l, bound)
			}
		}

		joined := append(slices.Clone(nodes), healthy("node-new")...)
		for _, rebalance := range []bool{true, false} {
			after = announcers(Assign(groups, joined, Options{Rebalance: rebalance, Standbys: 2}))
			all, _ = moves(before, after, "")
			least := 0
			if rebalance {
				bound = Bound(float64(size.services) / float64(len(joined)))
				for _, l := range loads(before, nodes) {
					least += max(0, l-bound)
				}
			}
			t.Logf("%d/%d: a node joined, rebalance %t: %d moved, at least %d must", size.services, size.nodes, rebalance, all, least)
			if all != least || float64(all) > float64(size.services)/float64(len(joined))+1 {
				t.Errorf("%d/%d: a node joined, rebalance %t: %d moved; want %d", size.services, size.nodes, rebalance, all, least)
			}
			for ip, n := range after {
				if n != before[ip] && n != "node-new" {
					t.Errorf("%d/%d: %s moved from %s to %s, not to the new node", size.services, size.nodes, ip, before[ip], n)
				}
			}
		}
	}
}

// TestAssignStandbysSpread checks that a node's groups spread over the others when it
// dies: each goes to its first standby, as the agents do without the ccm, none moves
// again once the ccm decides, and every node stays under its bound.
func TestAssignStandbysSpread(t *testing.T) {
	for _, size := range sizes {
		groups, nodes := equalCluster(size.services, size.nodes)
		r := Assign(groups, nodes, defaults)
		groups = decided(groups, r)
		for _, dead := range []Node{nodes[0], nodes[len(nodes)-1]} {
			took := map[string]string{} // what the agents do: the first live standby
			for ip, rk := range r {
				took[ip] = rk.Nodes[0]
				if rk.Nodes[0] == dead.Name {
					took[ip] = rk.Nodes[1]
				}
			}
			// Its groups' first standbys are as many apart as the others can be.
			held, backs := 0, map[string]int{}
			for _, rk := range r {
				if rk.Nodes[0] == dead.Name {
					held++
					backs[rk.Nodes[1]]++
				}
			}
			most := slices.Max(slices.Collect(maps.Values(backs)))
			if spread := (held + len(nodes) - 2) / (len(nodes) - 1); most > spread {
				t.Errorf("%d/%d: one node backs up %d of the %d groups of %s, want at most %d", size.services, size.nodes, most, held, dead.Name, spread)
			}
			left := without(nodes, dead.Name)
			down := append(slices.Clone(left), Node{Name: dead.Name}) // its agent answers no more
			after := Assign(groups, down, defaults)
			if all, _ := moves(took, announcers(after), ""); all != 0 {
				t.Errorf("%d/%d: %s died: the ccm moved %d groups the standbys had taken", size.services, size.nodes, dead.Name, all)
			}
			bound := Bound(float64(size.services) / float64(len(left)))
			l := loads(announcers(after), left)
			if hi := slices.Max(slices.Collect(maps.Values(l))); hi > bound {
				t.Errorf("%d/%d: %s died: a node holds %d, over the bound %d", size.services, size.nodes, dead.Name, hi, bound)
			}
		}
	}
}

// TestAssignSettles checks that neither the order of the groups nor of the nodes matters,
// and that a published decision is kept: decided again with itself as current and plan,
// nothing changes, the standbys included.
func TestAssignSettles(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 300 {
		groups, nodes := randomCluster(r)
		want := Assign(groups, nodes, defaults)
		shuffled := slices.Clone(groups)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		mixed := slices.Clone(nodes)
		r.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
		if got := Assign(shuffled, mixed, defaults); !equalRankings(got, want) {
			t.Fatalf("case %d: Assign depends on the order of its inputs", i)
		}
		// A standby that took over though it is not among the best gives way to them at
		// the next decision, as in Rank: from then on, nothing changes.
		groups = decided(groups, Assign(decided(groups, want), nodes, defaults))
		want = Assign(groups, nodes, defaults)
		again := Assign(decided(groups, want), nodes, defaults)
		for ip, rk := range want {
			if !slices.Equal(again[ip].Nodes, rk.Nodes) {
				t.Fatalf("case %d: %s was %v, decided again %v (%s)", i, ip, rk.Nodes, again[ip].Nodes, again[ip].Why)
			}
		}
	}
}

// TestAssignFollowsRank checks, on random groups of every kind, that the bound only
// chooses among the nodes Rank holds equal: the announcer has the preference and the
// endpoints of Rank's first, or is Rank's first when a standby took over, and each
// standby is of the same tier as the node at its place in Rank's order.
func TestAssignFollowsRank(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		groups, nodes := randomCluster(r)
		got := Assign(groups, nodes, defaults)
		for _, g := range groups {
			ranked, reason := Rank(g, nodes)
			rk := got[g.FirstIP]
			if len(ranked) == 0 || len(rk.Nodes) == 0 {
				if len(ranked) != len(rk.Nodes) || reason != rk.Reason {
					t.Fatalf("case %d, %s: Rank %v (%s), Assign %v (%s)", i, g.FirstIP, ranked, reason, rk.Nodes, rk.Reason)
				}
				continue
			}
			if reason == ReasonStandby && rk.Nodes[0] != ranked[0] && rk.Reason != ReasonBalance {
				t.Fatalf("case %d, %s: Rank's standby %s took over, Assign's %s", i, g.FirstIP, ranked[0], rk.Nodes[0])
			}
			if want := min(len(ranked), 1+defaults.Standbys); len(rk.Nodes) != want {
				t.Fatalf("case %d, %s: Assign %v, Rank %v", i, g.FirstIP, rk.Nodes, ranked)
			}
			for j, n := range rk.Nodes {
				if j == 0 && reason == ReasonStandby && rk.Reason != ReasonBalance {
					continue
				}
				if !equalCandidates(g, n, ranked[j]) {
					t.Fatalf("case %d, %s: Assign %v, Rank %v: %s and %s are not equal candidates", i, g.FirstIP, rk.Nodes, ranked, n, ranked[j])
				}
			}
			if rk.Reason != reason && rk.Reason != ReasonBalance {
				t.Fatalf("case %d, %s: Assign's reason %s, Rank's %s", i, g.FirstIP, rk.Reason, reason)
			}
		}
	}
}

// equalCandidates reports whether Rank holds a and b equal for g, the hash apart.
func equalCandidates(g Group, a, b string) bool {
	return preference(g, a) == preference(g, b) && g.Endpoints[a] == g.Endpoints[b] &&
		(preference(g, a) == len(g.PreferredNodes) || a == b)
}

// TestAssignEndpointsMoveOneService checks that endpoints moving in one group move that
// group alone.
func TestAssignEndpointsMoveOneService(t *testing.T) {
	groups, nodes := equalCluster(1000, 50)
	r := Assign(groups, nodes, defaults)
	before := announcers(r)
	groups = decided(groups, r)
	for _, i := range []int{0, 500, 999} {
		changed := slices.Clone(groups)
		changed[i].Endpoints = map[string]int{nodes[i%50].Name: 1, nodes[(i+7)%50].Name: 2}
		after := announcers(Assign(changed, nodes, defaults))
		all, _ := moves(before, after, "")
		if after[groups[i].FirstIP] != nodes[(i+7)%50].Name || all > 1 {
			t.Errorf("group %d's endpoints moved: it went to %s, %d groups moved", i, after[groups[i].FirstIP], all)
		}
	}
}

// randomCluster makes groups and nodes of every kind Assign knows, from r, each group
// with a current announcer and a plan from an earlier decision, or none.
func randomCluster(r *rand.Rand) ([]Group, []Node) {
	var groups []Group
	var nodes []Node
	for range 20 + r.IntN(80) {
		g, ns := randomGroup(r)
		g.FirstIP = fmt.Sprintf("10.0.%d.%d", len(groups)/250, len(groups)%250)
		groups = append(groups, g)
		if len(ns) > len(nodes) {
			nodes = ns
		}
	}
	return groups, nodes
}

// equalRankings reports whether a and b hold the same rankings.
func equalRankings(a, b map[string]Ranking) bool {
	return maps.EqualFunc(a, b, func(x, y Ranking) bool {
		return slices.Equal(x.Nodes, y.Nodes) && x.Reason == y.Reason && x.Why == y.Why
	})
}

// TestAssignLeaveMovesOnlyItsGroups checks, on random settled clusters of every kind,
// that a node leaving moves only the groups it announced, but for groups of a node that
// was already over its bound with nowhere to shed them: the nodes' shares only grow when
// a node leaves, and so can make room for them.
func TestAssignLeaveMovesOnlyItsGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	others, all := 0, 0
	for i := range 300 {
		groups, nodes := randomCluster(r)
		groups = decided(groups, Assign(groups, nodes, defaults))
		want := Assign(groups, nodes, defaults)
		groups = decided(groups, want)
		gone := nodes[r.IntN(len(nodes))].Name
		got := Assign(groups, without(nodes, gone), defaults)
		for ip, rk := range want {
			all++
			if len(rk.Nodes) == 0 || rk.Nodes[0] == gone || first(got[ip].Nodes) == rk.Nodes[0] {
				continue
			}
			if got[ip].Reason != ReasonBalance {
				t.Fatalf("case %d: %s left; %s moved from %s to %v (%s)", i, gone, ip, rk.Nodes[0], got[ip].Nodes, got[ip].Reason)
			}
			others++
		}
	}
	t.Logf("of %d groups, %d of nodes over their bound moved when another node left", all, others)
	if others*100 > all {
		t.Errorf("of %d groups, %d moved from nodes that stayed", all, others)
	}
}
