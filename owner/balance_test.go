package owner

import (
	"fmt"
	"maps"
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
