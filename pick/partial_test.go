package pick

import (
	"slices"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// lost returns n unable to announce the pool's family.
func lost(n Node, pool string, f iprange.Family) Node {
	n.Unable = append(slices.Clone(n.Unable), Unable{Pool: pool, Family: f, Why: n.Name + " has no " + f.String() + " address on eth0"})
	return n
}

// Both families, and one each, as PoolNodes.Families says them.
var (
	dualStack = [2]bool{true, true}
	onlyIPv4  = [2]bool{iprange.IPv4: true}
	onlyIPv6  = [2]bool{iprange.IPv6: true}
)

// TestLostFamilyKeepsTheOther checks that a group no node can announce whole is announced
// by the nodes that can announce the most of it, and by none when none can announce any.
func TestLostFamilyKeepsTheOther(t *testing.T) {
	const ip = "198.51.100.1"
	dual := Group{FirstIP: ip, Pools: []PoolNodes{{Pool: "default", Families: dualStack}}}
	twoPools := Group{FirstIP: ip, Pools: []PoolNodes{{Pool: "v4", Families: onlyIPv4}, {Pool: "v6", Families: onlyIPv6}}}
	h := hashOrder(ip, "a", "b", "c")
	a, b, c := Node{Name: "a", Healthy: true}, Node{Name: "b", Healthy: true}, Node{Name: "c", Healthy: true}
	for _, tc := range []struct {
		name  string
		group Group
		nodes []Node
		want  []string
	}{
		{"one node whole: it alone", dual, []Node{lost(a, "default", iprange.IPv6), b, lost(c, "default", iprange.IPv6)}, []string{"b"}},
		{"no IPv6 anywhere: every node, for IPv4", dual, []Node{lost(a, "default", iprange.IPv6), lost(b, "default", iprange.IPv6), lost(c, "default", iprange.IPv6)}, h},
		{"no node whole: those that announce the most",
			twoPools, []Node{lost(lost(a, "v4", iprange.IPv4), "v6", iprange.IPv6), lost(b, "v6", iprange.IPv6), lost(c, "v6", iprange.IPv6)}, removed(h, "a")},
		{"one family each: both, by hash", twoPools, []Node{lost(a, "v4", iprange.IPv4), lost(b, "v6", iprange.IPv6)}, removed(h, "c")},
		{"a node down stays out", dual, []Node{lost(a, "default", iprange.IPv6), {Name: "b", Unable: []Unable{}}, lost(c, "default", iprange.IPv6)}, removed(h, "b")},
		{"nothing anywhere: none", dual, []Node{lost(lost(a, "default", iprange.IPv6), "default", iprange.IPv4)}, nil},
	} {
		got, _ := Rank(tc.group, tc.nodes)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Rank = %v, want %v", tc.name, got, tc.want)
		}
		// Assign applies the same rule to every group at once.
		if got := Assign([]Group{tc.group}, tc.nodes, defaults)[ip].Nodes; first(got) != first(tc.want) {
			t.Errorf("%s: Assign = %v, want %q first", tc.name, got, first(tc.want))
		}
	}
}

func TestUnannounced(t *testing.T) {
	g := Group{FirstIP: "198.51.100.1", Pools: []PoolNodes{{Pool: "default", Families: dualStack}}}
	a, b := Node{Name: "a", Healthy: true}, Node{Name: "b", Healthy: true}
	down := lost(Node{Name: "d"}, "default", iprange.IPv6)
	if got := Unannounced(g, []Node{lost(a, "default", iprange.IPv6), b}, "b"); got != "" {
		t.Errorf("Unannounced of a node that announces everything = %q, want none", got)
	}
	got := Unannounced(g, []Node{lost(a, "default", iprange.IPv6), lost(b, "default", iprange.IPv6), down}, "a")
	if want := "the IPv6 addresses of pool default: a has no IPv6 address on eth0, b has no IPv6 address on eth0"; got != want {
		t.Errorf("Unannounced = %q, want %q", got, want)
	}
	if strings.Contains(got, "d has") {
		t.Errorf("Unannounced = %q names a node that is down anyway", got)
	}
}

// TestOnlyUnable checks that a group nobody may announce is put down to the nodes' links
// only when a node would be eligible but for them.
func TestOnlyUnable(t *testing.T) {
	g := Group{FirstIP: "198.51.100.1", Pools: []PoolNodes{{Pool: "default", Families: onlyIPv4}}}
	up := Node{Name: "a", Healthy: true}
	down := Node{Name: "b"}
	excluded := Node{Name: "c", Healthy: true, Labels: map[string]string{ExcludeLabel: ""}}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  bool
	}{
		{"no nodes", nil, false},
		{"a node able", []Node{up}, false},
		{"the one node up has no interface", []Node{lost(up, "default", iprange.IPv4), down}, true},
		{"only a node down has no interface", []Node{lost(down, "default", iprange.IPv4), excluded}, false},
		{"an excluded node has no interface", []Node{lost(excluded, "default", iprange.IPv4)}, false},
		{"another pool's interface is down", []Node{lost(up, "other", iprange.IPv4)}, false},
	} {
		if got := OnlyUnable(g, tc.nodes); got != tc.want {
			t.Errorf("%s: OnlyUnable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
