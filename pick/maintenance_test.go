package pick

import (
	"slices"
	"testing"
)

// TestDrainedAndOutOfService checks that an operator's drain and the out-of-service taint
// each take a healthy node out of the ranking, the announcer's place and the standbys'
// alike, preferred or not, with the reason in the explanation; and that a node no longer
// drained takes nothing back.
func TestDrainedAndOutOfService(t *testing.T) {
	const ip = "198.51.100.1"
	endpoints := map[string]int{"a": 1, "b": 1, "c": 1}
	drained := func(nodes []Node, name, why string) []Node {
		out := slices.Clone(nodes)
		for i := range out {
			if out[i].Name == name {
				out[i].Drained = why
			}
		}
		return out
	}
	outOfService := func(nodes []Node, name string) []Node {
		out := slices.Clone(nodes)
		for i := range out {
			if out[i].Name == name {
				out[i].OutOfService = true
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		group  Group
		nodes  []Node
		ranked []string
		reason Reason
		why    string // Explain from the group's Current
		keep   bool   // the group's Current stays first
	}{{
		name:   "the drained announcer hands over to the first standby of the plan",
		group:  Group{FirstIP: ip, Endpoints: endpoints, Current: "a", Plan: []string{"a", "c", "b"}},
		nodes:  drained(healthy("a", "b", "c"), "a", "by the annotation lb.baremetal.io/drain"),
		ranked: []string{"c", "b"},
		reason: ReasonStandby,
		why:    "a is drained by the annotation lb.baremetal.io/drain",
	}, {
		name:   "a drained preferred node is passed over",
		group:  Group{FirstIP: ip, Endpoints: endpoints, PreferredNodes: []string{"a", "b"}, Current: "a"},
		nodes:  drained(healthy("a", "b", "c"), "a", "as it is cordoned"),
		ranked: []string{"b", "c"},
		reason: ReasonPreferred,
		why:    "a is drained as it is cordoned",
	}, {
		name:   "a drained node is no standby",
		group:  Group{FirstIP: ip, Endpoints: endpoints, Current: "b"},
		nodes:  drained(healthy("a", "b", "c"), "c", "by the annotation lb.baremetal.io/drain"),
		ranked: []string{"b", "a"},
		reason: ReasonEndpoints,
	}, {
		name:   "undrained, a node takes nothing back: no failback",
		group:  Group{FirstIP: ip, Endpoints: endpoints, Current: "c", Plan: []string{"c", "b"}},
		nodes:  healthy("a", "b", "c"),
		reason: ReasonEndpoints,
		keep:   true,
	}, {
		name:   "an out-of-service announcer whose agent answers hands over",
		group:  Group{FirstIP: ip, Endpoints: endpoints, Current: "a", Plan: []string{"a", "b", "c"}},
		nodes:  outOfService(healthy("a", "b", "c"), "a"),
		ranked: []string{"b", "c"},
		reason: ReasonStandby,
		why:    "a is out of service by the taint node.kubernetes.io/out-of-service",
	}, {
		name:   "out of service and drained: the taint is named",
		group:  Group{FirstIP: ip, Endpoints: endpoints, Current: "a"},
		nodes:  outOfService(drained(healthy("a", "b", "c"), "a", "by the annotation lb.baremetal.io/drain"), "a"),
		reason: ReasonEndpoints,
		why:    "a is out of service by the taint node.kubernetes.io/out-of-service",
	}, {
		name:   "every node drained: none announces, and each says why",
		group:  Group{FirstIP: ip, Current: "a"},
		nodes:  drained(drained(healthy("a", "b"), "a", "by the annotation lb.baremetal.io/drain"), "b", "by the annotation lb.baremetal.io/drain"),
		ranked: []string{},
		reason: ReasonNoEligibleNode,
		why:    "no node may announce: a is drained by the annotation lb.baremetal.io/drain, b is drained by the annotation lb.baremetal.io/drain",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ranked, reason := Rank(tc.group, tc.nodes)
			if reason != tc.reason {
				t.Errorf("reason %s, want %s", reason, tc.reason)
			}
			if tc.ranked != nil && !slices.Equal(ranked, tc.ranked) {
				t.Errorf("ranked %v, want %v", ranked, tc.ranked)
			}
			if tc.keep && (len(ranked) == 0 || ranked[0] != tc.group.Current) {
				t.Errorf("ranked %v, want %s kept first", ranked, tc.group.Current)
			}
			for _, n := range tc.nodes {
				if (n.Drained != "" || n.OutOfService) && slices.Contains(ranked, n.Name) {
					t.Errorf("ranked %v holds %s, which may not announce", ranked, n.Name)
				}
			}
			if tc.why != "" {
				d := Select(tc.group, tc.nodes)
				if got := Explain(tc.group.Current, tc.group, tc.nodes, d); got != tc.why {
					t.Errorf("Explain = %q, want %q", got, tc.why)
				}
			}
		})
	}
}
