package pick

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func healthy(names ...string) []Node {
	var out []Node
	for _, n := range names {
		out = append(out, Node{Name: n, Healthy: true, Labels: labels.Set{"zone": "a"}})
	}
	return out
}

// hashOrder returns names ordered by the tie-breaking hash for ip.
func hashOrder(ip string, names ...string) []string {
	nodes := healthy(names...)
	var out []string
	for len(nodes) > 0 {
		d := Select(Group{FirstIP: ip}, nodes)
		out = append(out, d.Node)
		nodes = slices.DeleteFunc(nodes, func(n Node) bool { return n.Name == d.Node })
	}
	return out
}

func TestSelect(t *testing.T) {
	const ip = "198.51.100.1"
	order := hashOrder(ip, "a", "b", "c")
	first, second := order[0], order[1]

	tests := []struct {
		name   string
		group  Group
		nodes  []Node
		want   Decision
		reason string // Explain from previous announcer "prev"
		prev   string
	}{{
		name:  "cluster without endpoints: any eligible node, by hash",
		group: Group{FirstIP: ip},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: first, Reason: ReasonNoEndpoints},
	}, {
		name:  "most ready endpoints win",
		group: Group{FirstIP: ip, Endpoints: map[string]int{first: 1, second: 2}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: second, Reason: ReasonEndpoints},
		prev:  first, reason: fmt.Sprintf("%s has more ready endpoints (2) than %s (1)", second, first),
	}, {
		name:  "no failback: the current announcer keeps the address among equals",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 1, "b": 1, "c": 1}, Current: second},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: second, Reason: ReasonEndpoints},
	}, {
		name:  "no failback, but more ready endpoints still win",
		group: Group{FirstIP: ip, Endpoints: map[string]int{first: 2, second: 1}, Current: second},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: first, Reason: ReasonEndpoints},
	}, {
		name:  "no failback, but a preferred node still wins",
		group: Group{FirstIP: ip, PreferredNodes: []string{first}, Current: second},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: first, Reason: ReasonPreferred},
		prev:  second, reason: fmt.Sprintf("preferred node %s became eligible", first),
	}, {
		name:  "a current announcer that is not eligible is left",
		group: Group{FirstIP: ip, Current: first},
		nodes: append(healthy("a", "b", "c")[:0:0], Node{Name: first, Draining: true}, healthy(second)[0]),
		want:  Decision{Node: second, Reason: ReasonNoEndpoints},
		prev:  first, reason: first + " agent is draining",
	}, {
		name:  "equal endpoints: hash",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 1, "b": 1, "c": 1}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: first, Reason: ReasonEndpoints},
	}, {
		name:  "cluster prefers nodes with endpoints over the hash",
		group: Group{FirstIP: ip, Endpoints: map[string]int{second: 1}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: second, Reason: ReasonEndpoints},
		prev:  first, reason: first + " has no ready endpoint",
	}, {
		name:  "local without endpoints: nobody",
		group: Group{FirstIP: ip, Local: []LocalService{{Service: "team-a/x"}}},
		nodes: healthy("a", "b"),
		want:  Decision{Reason: ReasonNoLocalEndpoints},
		prev:  "a", reason: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of team-a/x",
	}, {
		name:  "local: only nodes with endpoints",
		group: Group{FirstIP: ip, Local: []LocalService{{Service: "team-a/x", Endpoints: map[string]int{"c": 1}}}, Endpoints: map[string]int{"c": 1}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: "c", Reason: ReasonEndpoints},
	}, {
		name:  "local: endpoints only on an unhealthy node",
		group: Group{FirstIP: ip, Local: []LocalService{{Service: "team-a/x", Endpoints: map[string]int{"c": 3}}}, Endpoints: map[string]int{"c": 3}},
		nodes: append(healthy("a", "b"), Node{Name: "c"}),
		want:  Decision{Reason: ReasonNoLocalEndpoints},
		prev:  "c", reason: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of team-a/x",
	}, {
		// The old rule summed the two Services' endpoints and picked a, whose pods are all
		// x's: y's clients would lose their traffic there.
		name: "local: two Services without a common node",
		group: Group{FirstIP: ip,
			Local: []LocalService{
				{Service: "team-a/y", Endpoints: map[string]int{"b": 1, "ghost": 1}},
				{Service: "team-a/x", Endpoints: map[string]int{"a": 2}},
			},
			Endpoints: map[string]int{"a": 2, "b": 1, "ghost": 1}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Reason: ReasonNoLocalEndpoints},
		prev:  "a", reason: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of every Local Service: " +
			"team-a/x has ready endpoints on a; team-a/y has ready endpoints on b",
	}, {
		name: "local: a Service with endpoints only on nodes that are not eligible",
		group: Group{FirstIP: ip,
			Local: []LocalService{
				{Service: "team-a/x", Endpoints: map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}},
				{Service: "team-a/y", Endpoints: map[string]int{"f": 1, "ghost": 1}},
			},
			Endpoints: map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 2, "ghost": 1}},
		nodes: append(healthy("e", "c", "a", "d", "b"), Node{Name: "f", Draining: true}),
		want:  Decision{Reason: ReasonNoLocalEndpoints},
		prev:  "f", reason: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of every Local Service: " +
			"team-a/x has ready endpoints on a, b, c, and 2 more; team-a/y has none on an eligible node",
	}, {
		// The old rule took c, which has the most endpoints in total, all of them x's.
		name: "local: the common node wins over more endpoints elsewhere",
		group: Group{FirstIP: ip,
			Local: []LocalService{
				{Service: "team-a/x", Endpoints: map[string]int{"b": 1, "c": 5}},
				{Service: "team-a/y", Endpoints: map[string]int{"a": 3, "b": 1}},
			},
			Endpoints: map[string]int{"a": 3, "b": 2, "c": 5}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "c", reason: "c has no ready endpoint of team-a/y",
	}, {
		// A Cluster Service of the group adds to the total but not to the Local rule.
		name: "local and cluster Services: the Cluster Service's endpoints rank the candidates",
		group: Group{FirstIP: ip,
			Local:     []LocalService{{Service: "team-a/x", Endpoints: map[string]int{"a": 1, "b": 1}}},
			Endpoints: map[string]int{"a": 1, "b": 4, "c": 9}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "b has more ready endpoints (4) than a (1)",
	}, {
		// The old rule took a: preferred, and with endpoints in the group's total.
		name: "local: a preferred node without an endpoint of one Local Service is not chosen",
		group: Group{FirstIP: ip, PreferredNodes: []string{"a", "c"},
			Local: []LocalService{
				{Service: "team-a/x", Endpoints: map[string]int{"a": 5, "b": 1, "c": 1}},
				{Service: "team-a/y", Endpoints: map[string]int{"b": 1, "c": 1}},
			},
			Endpoints: map[string]int{"a": 5, "b": 2, "c": 2}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: "c", Reason: ReasonPreferred},
		prev:  "a", reason: "a has no ready endpoint of team-a/y",
	}, {
		name:  "preferred node first",
		group: Group{FirstIP: ip, PreferredNodes: []string{"x", "c", "b"}},
		nodes: healthy("a", "b", "c"),
		want:  Decision{Node: "c", Reason: ReasonPreferred},
		prev:  "a", reason: "preferred node c became eligible",
	}, {
		name:  "preferred node not eligible: next preferred",
		group: Group{FirstIP: ip, PreferredNodes: []string{"c", "b"}},
		nodes: append(healthy("a", "b"), Node{Name: "c", Healthy: true, Labels: labels.Set{ExcludeLabel: ""}}),
		want:  Decision{Node: "b", Reason: ReasonPreferred},
		prev:  "c", reason: "c is excluded by the label node.kubernetes.io/exclude-from-external-load-balancers",
	}, {
		name:  "preferred node without endpoints is not a candidate when others have some",
		group: Group{FirstIP: ip, PreferredNodes: []string{"a"}, Endpoints: map[string]int{"b": 1}},
		nodes: healthy("a", "b"),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
	}, {
		name:  "unhealthy agent",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 5, "b": 1}},
		nodes: append(healthy("b"), Node{Name: "a"}),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "a agent not answering",
	}, {
		name:  "deleting node",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 5, "b": 1}},
		nodes: append(healthy("b"), Node{Name: "a", Healthy: true, Deleting: true}),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "a is being deleted",
	}, {
		name:  "node gone",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 5, "b": 1}},
		nodes: healthy("b"),
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "a is gone",
	}, {
		name:  "pool nodeSelector",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 5, "b": 1}, Pools: []PoolNodes{{Pool: "public", NodeSelector: labels.SelectorFromSet(labels.Set{"edge": "true"})}}},
		nodes: []Node{{Name: "a", Healthy: true}, {Name: "b", Healthy: true, Labels: labels.Set{"edge": "true"}}},
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "a does not match the nodeSelector of pool public",
	}, {
		// Dual-stack: the IPv4 pool lets every node in, the IPv6 pool only the edge nodes.
		name: "a node excluded by the second pool's nodeSelector",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"a": 5, "b": 1}, Pools: []PoolNodes{
			{Pool: "v4", NodeSelector: labels.SelectorFromSet(labels.Set{"zone": "a"})},
			{Pool: "v6", NodeSelector: labels.SelectorFromSet(labels.Set{"edge": "true"})},
		}},
		nodes: []Node{{Name: "a", Healthy: true, Labels: labels.Set{"zone": "a"}}, {Name: "b", Healthy: true, Labels: labels.Set{"zone": "a", "edge": "true"}}},
		want:  Decision{Node: "b", Reason: ReasonEndpoints},
		prev:  "a", reason: "a does not match the nodeSelector of pool v6",
	}, {
		name: "a node excluded by both pools: the first pool is named",
		group: Group{FirstIP: ip, Pools: []PoolNodes{
			{Pool: "v4", NodeSelector: labels.SelectorFromSet(labels.Set{"zone": "b"})},
			{Pool: "v6", NodeSelector: labels.SelectorFromSet(labels.Set{"edge": "true"})},
			{Pool: "all"}, // nil selector: every node
		}},
		nodes: healthy("a"),
		want:  Decision{Reason: ReasonNoEligibleNode},
		prev:  "a", reason: "no node may announce: a does not match the nodeSelector of pool v4",
	}, {
		name:  "endpoints on a node that does not exist count for nothing",
		group: Group{FirstIP: ip, Endpoints: map[string]int{"ghost": 9}},
		nodes: healthy("a"),
		want:  Decision{Node: "a", Reason: ReasonNoEndpoints},
	}, {
		name:  "no nodes",
		group: Group{FirstIP: ip},
		want:  Decision{Reason: ReasonNoEligibleNode},
		prev:  "a", reason: "no node may announce: there are no nodes",
	}, {
		name:  "no eligible node",
		group: Group{FirstIP: ip},
		nodes: []Node{{Name: "a"}, {Name: "b", Deleting: true, Healthy: true}},
		want:  Decision{Reason: ReasonNoEligibleNode},
		prev:  "a", reason: "no node may announce: a agent not answering, b is being deleted",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Select(tc.group, tc.nodes)
			if got != tc.want {
				t.Errorf("Select = %+v, want %+v", got, tc.want)
			}
			if tc.prev != "" {
				if why := Explain(tc.prev, tc.group, tc.nodes, got); why != tc.reason {
					t.Errorf("Explain = %q, want %q", why, tc.reason)
				}
			}
		})
	}
}

// TestOrderDoesNotMatter shuffles the nodes, the Local Services and the pools: neither the
// decision nor its explanation may change.
func TestOrderDoesNotMatter(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("node-%02d", i)
	}
	local := 0
	for i := range 400 {
		g := Group{FirstIP: fmt.Sprintf("198.51.100.%d", i), Endpoints: map[string]int{}}
		for range 5 {
			g.Endpoints[names[rnd.IntN(len(names))]] += rnd.IntN(3)
		}
		// Half the groups are Local, of up to three Services whose endpoints add to the total.
		for s := range rnd.IntN(4) * (i % 2) {
			l := LocalService{Service: fmt.Sprintf("ns/svc-%d", s), Endpoints: map[string]int{}}
			for range 1 + rnd.IntN(15) {
				n := names[rnd.IntN(len(names))]
				l.Endpoints[n]++
				g.Endpoints[n]++
			}
			g.Local = append(g.Local, l)
		}
		nodes := healthy(names...)
		for j := range nodes {
			nodes[j].Labels = labels.Set{"v4": fmt.Sprint(rnd.IntN(5) > 0), "v6": fmt.Sprint(rnd.IntN(5) > 0)}
		}
		if i%3 == 0 {
			g.Pools = []PoolNodes{
				{Pool: "v4", NodeSelector: labels.SelectorFromSet(labels.Set{"v4": "true"})},
				{Pool: "v6", NodeSelector: labels.SelectorFromSet(labels.Set{"v6": "true"})},
			}
		}
		prev := names[rnd.IntN(len(names))]
		want := Select(g, nodes)
		why := Explain(prev, g, nodes, want)
		if want.Reason == ReasonNoLocalEndpoints || len(g.Local) > 0 && want.Node != "" {
			local++
		}
		for range 5 {
			rnd.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
			rnd.Shuffle(len(g.Local), func(i, j int) { g.Local[i], g.Local[j] = g.Local[j], g.Local[i] })
			rnd.Shuffle(len(g.Pools), func(i, j int) { g.Pools[i], g.Pools[j] = g.Pools[j], g.Pools[i] })
			got := Select(g, nodes)
			if got != want {
				t.Fatalf("group %d: %+v after a shuffle, %+v before", i, got, want)
			}
			if w := Explain(prev, g, nodes, got); w != why && !strings.Contains(why, "nodeSelector of pool") {
				t.Fatalf("group %d: Explain %q after a shuffle, %q before", i, w, why)
			}
		}
	}
	if local < 100 {
		t.Errorf("only %d Local groups were exercised", local)
	}
}

// TestSpread checks how evenly 1,000 Services spread over 50 equal nodes, and that nodes
// coming and going move only the Services they must.
func TestSpread(t *testing.T) {
	const services, nodeCount = 1000, 50
	names := make([]string, nodeCount)
	for i := range names {
		names[i] = fmt.Sprintf("node-%02d", i)
	}
	groups := make([]Group, services)
	for i := range groups {
		groups[i] = Group{FirstIP: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}
	}
	assign := func(nodes []Node) []string {
		out := make([]string, len(groups))
		for i, g := range groups {
			out[i] = Select(g, nodes).Node
		}
		return out
	}
	all := assign(healthy(names...))
	perNode := map[string]int{}
	for _, n := range all {
		perNode[n]++
	}
	busiest := 0
	for _, c := range perNode {
		busiest = max(busiest, c)
	}
	mean := float64(services) / nodeCount
	t.Logf("busiest node owns %d Services, %.2f× the mean of %.0f", busiest, float64(busiest)/mean, mean)
	if float64(busiest) > 2*mean {
		t.Errorf("busiest node owns %d, more than 2× the mean %.0f", busiest, mean)
	}

	// Removing a node moves only what it owned.
	without := assign(healthy(names[1:]...))
	for i := range groups {
		if all[i] != names[0] && without[i] != all[i] {
			t.Errorf("service %d moved from %s to %s when %s left", i, all[i], without[i], names[0])
		}
	}
	// Adding a node moves at most 2× its fair share, all of it to the new node.
	with := assign(healthy(append(slices.Clone(names), "node-new")...))
	moved := 0
	for i := range groups {
		if with[i] != all[i] {
			moved++
			if with[i] != "node-new" {
				t.Errorf("service %d moved from %s to %s, not to the new node", i, all[i], with[i])
			}
		}
	}
	ideal := float64(services) / (nodeCount + 1)
	t.Logf("adding a node moved %d Services; the ideal share is %.1f", moved, ideal)
	if float64(moved) > 2*ideal {
		t.Errorf("adding a node moved %d Services, more than 2× the ideal %.1f", moved, ideal)
	}
}

func BenchmarkSelect(b *testing.B) {
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("node-%02d", i)
	}
	nodes := healthy(names...)
	g := Group{FirstIP: "198.51.100.7", Endpoints: map[string]int{"node-01": 1, "node-07": 1, "node-33": 1}}
	for b.Loop() {
		Select(g, nodes)
	}
}
