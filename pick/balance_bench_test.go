package pick

import (
	"fmt"
	"testing"
)

// BenchmarkSpread reports, per size of equal nodes without endpoints, the busiest and the
// idlest node over the mean (max/mean, min/mean), and the groups moved when a node leaves
// and when one joins, with the fewest that must move (leave-min: the leaving node's
// groups; join-min: what brings every node under its bound). Its figures are those of
// docs/performance.md's table; the time per op is one Assign of all groups.
func BenchmarkSpread(b *testing.B) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("services=%d/nodes=%d", size.services, size.nodes), func(b *testing.B) {
			groups, nodes := equalCluster(size.services, size.nodes)
			var r map[string]Ranking
			for b.Loop() {
				r = Assign(groups, nodes, defaults)
			}
			before := announcers(r)
			hi, lo := spreadOf(before, nodes)
			groups = decided(groups, r)
			gone := nodes[len(nodes)/2].Name
			leave, _ := moves(before, announcers(Assign(groups, without(nodes, gone), defaults)), "")
			joined := append(nodes[:len(nodes):len(nodes)], healthy("node-new")...)
			join, _ := moves(before, announcers(Assign(groups, joined, defaults)), "")
			least := 0
			bound := Bound(float64(size.services) / float64(len(joined)))
			for _, l := range loads(before, nodes) {
				least += max(0, l-bound)
			}
			b.ReportMetric(hi, "max/mean")
			b.ReportMetric(lo, "min/mean")
			b.ReportMetric(float64(leave), "leave-moves")
			b.ReportMetric(float64(loads(before, nodes)[gone]), "leave-min")
			b.ReportMetric(float64(join), "join-moves")
			b.ReportMetric(float64(least), "join-min")
		})
	}
}

// BenchmarkSpreadHashOnly reports max/mean and min/mean of the hash order alone (Select,
// one group at a time, no bound), for comparison.
func BenchmarkSpreadHashOnly(b *testing.B) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("services=%d/nodes=%d", size.services, size.nodes), func(b *testing.B) {
			groups, nodes := equalCluster(size.services, size.nodes)
			a := map[string]string{}
			for b.Loop() {
				for _, g := range groups {
					a[g.FirstIP] = Select(g, nodes).Node
				}
			}
			hi, lo := spreadOf(a, nodes)
			b.ReportMetric(hi, "max/mean")
			b.ReportMetric(lo, "min/mean")
		})
	}
}

// BenchmarkAssignNodeLeaves decides 5,000 groups over 1,000 nodes again after a node left,
// the groups holding the decision made before: what the ccm does after a node event. It
// reports the groups moved.
func BenchmarkAssignNodeLeaves(b *testing.B) {
	groups, nodes := equalCluster(5000, 1000)
	r := Assign(groups, nodes, defaults)
	groups = decided(groups, r)
	gone := nodes[500].Name
	left := without(nodes, gone)
	var after map[string]Ranking
	b.ReportAllocs()
	for b.Loop() {
		after = Assign(groups, left, defaults)
	}
	moved, _ := moves(announcers(r), announcers(after), "")
	b.ReportMetric(float64(moved), "moves")
	b.ReportMetric(float64(loads(announcers(r), nodes)[gone]), "leave-min")
}
