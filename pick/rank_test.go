package pick

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// without returns nodes without the one named name.
func without(nodes []Node, name string) []Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.Name == name })
}

// removed returns names without name.
func removed(names []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == name })
}

func TestRank(t *testing.T) {
	const ip = "198.51.100.1"
	h := hashOrder(ip, "a", "b", "c", "d")
	sick := Node{Name: h[0]} // answers no probe
	for _, tc := range []struct {
		name   string
		group  Group
		nodes  []Node
		want   []string
		reason Reason
	}{
		{"no endpoints: every eligible node, by hash", Group{FirstIP: ip}, healthy("a", "b", "c", "d"), h, ReasonNoEndpoints},
		{"candidates by endpoints, then the eligible rest by hash",
			Group{FirstIP: ip, Endpoints: map[string]int{h[3]: 2, h[2]: 1}}, healthy("a", "b", "c", "d"),
			[]string{h[3], h[2], h[0], h[1]}, ReasonEndpoints},
		{"preferred first, in their order",
			Group{FirstIP: ip, PreferredNodes: []string{h[2], h[1]}, Endpoints: map[string]int{h[0]: 1, h[1]: 1, h[2]: 1, h[3]: 5}}, healthy("a", "b", "c", "d"),
			[]string{h[2], h[1], h[3], h[0]}, ReasonPreferred},
		{"the current announcer first among equals",
			Group{FirstIP: ip, Current: h[2]}, healthy("a", "b", "c", "d"),
			[]string{h[2], h[0], h[1], h[3]}, ReasonNoEndpoints},
		{"ineligible nodes are left out",
			Group{FirstIP: ip}, append(healthy(h[1], h[3]), sick, Node{Name: h[2], Healthy: true, Draining: true}),
			[]string{h[1], h[3]}, ReasonNoEndpoints},
		{"local: only nodes with an endpoint of every Local Service",
			Group{FirstIP: ip, Local: []LocalService{{Service: "ns/l", Endpoints: map[string]int{h[1]: 1, h[3]: 1}}}, Endpoints: map[string]int{h[1]: 1, h[3]: 1, h[0]: 4}},
			healthy("a", "b", "c", "d"), []string{h[1], h[3]}, ReasonEndpoints},
		{"no node", Group{FirstIP: ip}, []Node{sick}, nil, ReasonNoEligibleNode},
	} {
		got, reason := Rank(tc.group, tc.nodes)
		if !slices.Equal(got, tc.want) || reason != tc.reason {
			t.Errorf("%s: Rank = %v, %s; want %v, %s", tc.name, got, reason, tc.want, tc.reason)
		}
		if d := Select(tc.group, tc.nodes); d.Node != first(got) || d.Reason != reason {
			t.Errorf("%s: Select = %+v, Rank = %v, %s", tc.name, d, got, reason)
		}
	}
}

// first returns names[0], or "" for none.
func first(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// TestRankStandby checks who takes over from an announcer that went down: the first node
// of the published plan among the best candidates, which the agents chose on their own,
// not the node the hash would rank first.
func TestRankStandby(t *testing.T) {
	const ip = "198.51.100.1"
	h := hashOrder(ip, "a", "b", "c", "d")
	cur, c1, c2, c3 := h[3], h[0], h[1], h[2]
	down := append(healthy(c1, c2, c3), Node{Name: cur}) // cur's agent answers no more
	all := healthy("a", "b", "c", "d")
	both := map[string]int{c1: 1, c2: 1}
	for _, tc := range []struct {
		name   string
		group  Group
		nodes  []Node
		want   []string
		reason Reason
	}{
		{"the plan's first live node, though the hash ranks another first",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c2, c1}}, down, []string{c2, c1, c3}, ReasonStandby},
		{"the standby that took over gone too: the plan's next, ahead of a node the hash ranks higher",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c1, c3}}, append(healthy(c2, c3), Node{Name: cur}), []string{c3, c2}, ReasonStandby},
		{"announcer gone from the nodes", Group{FirstIP: ip, Current: cur, Plan: []string{cur, c3}}, healthy(c1, c2, c3), []string{c3, c1, c2}, ReasonStandby},
		{"a standby without endpoints is passed over for the next among the candidates",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c3, c2}, Endpoints: both}, down, []string{c2, c1, c3}, ReasonStandby},
		{"no standby among the candidates: the rank decides",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c3}, Endpoints: both}, down, []string{c1, c2, c3}, ReasonEndpoints},
		{"the announcer up: the plan changes nothing",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c2}}, all, []string{cur, c1, c2, c3}, ReasonNoEndpoints},
		{"failback (no current announcer): the plan changes nothing",
			Group{FirstIP: ip, Plan: []string{cur, c2}}, down, []string{c1, c2, c3}, ReasonNoEndpoints},
		{"local: a standby without a local endpoint is no candidate",
			Group{FirstIP: ip, Current: cur, Plan: []string{cur, c2, c3}, Endpoints: map[string]int{c1: 1, c3: 1},
				Local: []LocalService{{Service: "ns/l", Endpoints: map[string]int{c1: 1, c3: 1}}}},
			down, []string{c3, c1}, ReasonStandby},
	} {
		got, reason := Rank(tc.group, tc.nodes)
		if !slices.Equal(got, tc.want) || reason != tc.reason {
			t.Errorf("%s: Rank = %v, %s; want %v, %s", tc.name, got, reason, tc.want, tc.reason)
		}
		if d := Select(tc.group, tc.nodes); d.Node != first(got) || d.Reason != reason {
			t.Errorf("%s: Select = %+v, Rank = %v, %s", tc.name, d, got, reason)
		}
	}
	d := Select(Group{FirstIP: ip, Current: cur, Plan: []string{cur, c2}}, down)
	if got, want := Explain("", Group{}, nil, d), c2+" is the first standby that can announce"; got != want {
		t.Errorf("Explain = %q, want %q", got, want)
	}
}

// randomGroup makes a group and nodes of every kind the rule knows, from r.
func randomGroup(r *rand.Rand) (Group, []Node) {
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"}[:3+r.IntN(6)]
	g := Group{FirstIP: fmt.Sprintf("198.51.100.%d", r.IntN(250)), Endpoints: map[string]int{}}
	local := r.IntN(3) == 0
	if local {
		g.Local = []LocalService{{Service: "ns/l", Endpoints: map[string]int{}}}
	}
	var nodes []Node
	for _, n := range names {
		nodes = append(nodes, Node{Name: n, Healthy: r.IntN(5) > 0, Draining: r.IntN(10) == 0, Deleting: r.IntN(20) == 0})
		if e := r.IntN(4) - 1; e > 0 {
			g.Endpoints[n] = e
			if local && r.IntN(2) == 0 {
				g.Local[0].Endpoints[n] = 1
			}
		}
	}
	for range r.IntN(3) {
		g.PreferredNodes = append(g.PreferredNodes, names[r.IntN(len(names))])
	}
	if r.IntN(3) > 0 {
		g.Current = names[r.IntN(len(names))]
	}
	if r.IntN(2) == 0 {
		g.Plan = slices.Clone(names)
		r.Shuffle(len(g.Plan), func(i, j int) { g.Plan[i], g.Plan[j] = g.Plan[j], g.Plan[i] })
		g.Plan = g.Plan[:1+r.IntN(3)]
	}
	return g, nodes
}

// TestRankRemovingANodeKeepsTheOrder checks, on random groups, that the order of the
// nodes left is the order they had when another node goes: the standbys the ccm
// published are then those the next decision takes, in that order. Only the plan may
// change that, when the current announcer is not among the best candidates: then one
// node of the plan moves to the front, the node the agents chose on their own, and the
// others keep their order.
func TestRankRemovingANodeKeepsTheOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	moved := 0
	for i := range 3000 {
		g, nodes := randomGroup(r)
		ranked, reason := Rank(g, nodes)
		if d := Select(g, nodes); d.Node != first(ranked) || d.Reason != reason {
			t.Fatalf("case %d: Select = %+v, Rank = %v, %s", i, d, ranked, reason)
		}
		shuffled := slices.Clone(nodes)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, _ := Rank(g, shuffled); !slices.Equal(again, ranked) {
			t.Fatalf("case %d: Rank depends on the order of the nodes: %v, then %v", i, ranked, again)
		}
		for _, n := range nodes {
			if n.Name == g.Current && len(g.Plan) > 0 {
				continue // the current announcer is fixed: without it, the plan decides
			}
			got, why := Rank(g, without(nodes, n.Name))
			want := removed(ranked, n.Name)
			if slices.Equal(got, want) {
				continue
			}
			if why != ReasonStandby || !slices.Contains(g.Plan, got[0]) || !slices.Equal(removed(got, got[0]), removed(want, got[0])) {
				t.Fatalf("case %d: %+v over %+v: Rank %v (%s); without %s, %v (%s), want %v", i, g, nodes, ranked, reason, n.Name, got, why, want)
			}
			moved++
		}
	}
	if moved == 0 {
		t.Error("no random case had a standby take over: the generator misses the plan")
	}
	t.Logf("%d removals moved a standby of the plan to the front", moved)
}
