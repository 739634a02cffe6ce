package owner

import (
	"slices"
	"strings"
	"testing"
)

// lost returns n unable to announce the pool's family.
func lost(n Node, pool string, ipv6 bool) Node {
	fam := "IPv4"
	if ipv6 {
		fam = "IPv6"
	}
	n.Unable = append(slices.Clone(n.Unable), Unable{Pool: pool, IPv6: ipv6, Why: n.Name + " has no " + fam + " address on eth0"})
	return n
}

// TestLostFamilyKeepsTheOther checks that a group no node can announce whole is announced
// by the nodes that can announce the most of it, and by none when none can announce any.
func TestLostFamilyKeepsTheOther(t *testing.T) {
	const ip = "198.51.100.1"
	dual := Group{FirstIP: ip, Pools: []PoolNodes{{Pool: "default", IPv4: true, IPv6: true}}}
	twoPools := Group{FirstIP: ip, Pools: []PoolNodes{{Pool: "v4", IPv4: true}, {Pool: "v6", IPv6: true}}}
	h := hashOrder(ip, "a", "b", "c")
	a, b, c := Node{Name: "a", Healthy: true}, Node{Name: "b", Healthy: true}, Node{Name: "c", Healthy: true}
	for _, tc := range []struct {
		name  string
		group Group
		nodes []Node
		want  []string
	}{
		{"one node whole: it alone", dual, []Node{lost(a, "default", true), b, lost(c, "default", true)}, []string{"b"}},
		{"no IPv6 anywhere: every node, for IPv4", dual, []Node{lost(a, "default", true), lost(b, "default", true), lost(c, "default", true)}, h},
		{"no node whole: those that announce the most",
			twoPools, []Node{lost(lost(a, "v4", false), "v6", true), lost(b, "v6", true), lost(c, "v6", true)}, removed(h, "a")},
		{"one family each: both, by hash", twoPools, []Node{lost(a, "v4", false), lost(b, "v6", true)}, removed(h, "c")},
		{"a node down stays out", dual, []Node{lost(a, "default", true), {Name: "b", Unable: []Unable{}}, lost(c, "default", true)}, removed(h, "b")},
		{"nothing anywhere: none", dual, []Node{lost(lost(a, "default", true), "default", false)}, nil},
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
	g := Group{FirstIP: "198.51.100.1", Pools: []PoolNodes{{Pool: "default", IPv4: true, IPv6: true}}}
	a, b := Node{Name: "a", Healthy: true}, Node{Name: "b", Healthy: true}
	down := lost(Node{Name: "d"}, "default", true)
	if got := Unannounced(g, []Node{lost(a, "default", true), b}, "b"); got != "" {
		t.Errorf("Unannounced of a node that announces everything = %q, want none", got)
	}
	got := Unannounced(g, []Node{lost(a, "default", true), lost(b, "default", true), down}, "a")
	if want := "the IPv6 addresses of pool default: a has no IPv6 address on eth0, b has no IPv6 address on eth0"; got != want {
		t.Errorf("Unannounced = %q, want %q", got, want)
	}
	if strings.Contains(got, "d has") {
		t.Errorf("Unannounced = %q names a node that is down anyway", got)
	}
}
