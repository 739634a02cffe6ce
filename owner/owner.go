// Package owner holds the rule that picks the one node announcing an address: a pure,
// deterministic function of the Services sharing the address, their ready endpoints per
// node, and the nodes. The ccm applies it; nothing about it needs Kubernetes to test.
package owner

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// ExcludeLabel keeps a node from announcing any address, as it keeps it out of every
// cloud load balancer.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// Node is what the rule needs to know about a node.
type Node struct {
	Name     string
	Labels   labels.Set
	Deleting bool // has a deletion timestamp
	// Healthy says the node's agent answers the ccm's probes and can reach the network.
	Healthy bool
	// Draining says the node's agent answers that it is shutting down; such a node is not
	// Healthy.
	Draining bool
}

// Group is the Services that share one address, or a single Service. They always get the
// same announcer.
type Group struct {
	// FirstIP is the group's first address, as text; it salts the hash that spreads
	// owners over nodes, and keeps the Services of one address together.
	FirstIP string
	// Local is true when a Service of the group has externalTrafficPolicy Local: only a
	// node with a ready endpoint of its own may announce, or clients lose their traffic.
	Local bool
	// PreferredNodes are node names in order of preference.
	PreferredNodes []string
	// Endpoints counts the group's ready, non-terminating endpoints per node name.
	Endpoints map[string]int
	// NodeSelector is the pool's: only matching nodes may announce. Nil selects all.
	NodeSelector labels.Selector
	// Current is the node announcing now, or "". Among the candidates with the most ready
	// endpoints it keeps the address: a node that comes back after a failure does not take
	// its addresses back, which would break connections a second time. Leave it empty for
	// the pure hash order.
	Current string
}

// Reason says, for machines, why a node was chosen or none was.
type Reason string

// The reasons of a Decision.
const (
	// ReasonPreferred: the first eligible node of PreferredNodes that is a candidate.
	ReasonPreferred Reason = "PreferredNode"
	// ReasonEndpoints: the candidate with the most ready endpoints, ties broken by hash.
	ReasonEndpoints Reason = "ReadyEndpoints"
	// ReasonNoEndpoints: a Cluster group without ready endpoints anywhere; any eligible node.
	ReasonNoEndpoints Reason = "NoReadyEndpoints"
	// ReasonNoEligibleNode: no node may announce.
	ReasonNoEligibleNode Reason = "NoEligibleNode"
	// ReasonNoLocalEndpoints: a Local group whose eligible nodes have no ready endpoint.
	ReasonNoLocalEndpoints Reason = "NoLocalEndpoints"
)

// Decision is the outcome of Select: the announcing node, or "" when none may announce.
type Decision struct {
	Node   string
	Reason Reason
}

// Select picks the node that announces g's address among nodes. The order of nodes does
// not matter.
func Select(g Group, nodes []Node) Decision {
	var eligible []string
	for _, n := range nodes {
		if Eligible(g, n) == "" {
			eligible = append(eligible, n.Name)
		}
	}
	if len(eligible) == 0 {
		return Decision{Reason: ReasonNoEligibleNode}
	}
	candidates := slices.DeleteFunc(slices.Clone(eligible), func(n string) bool { return g.Endpoints[n] == 0 })
	reason := ReasonEndpoints
	if len(candidates) == 0 {
		if g.Local {
			return Decision{Reason: ReasonNoLocalEndpoints}
		}
		candidates, reason = eligible, ReasonNoEndpoints
	}
	for _, p := range g.PreferredNodes {
		if slices.Contains(candidates, p) {
			return Decision{Node: p, Reason: ReasonPreferred}
		}
	}
	return Decision{Node: slices.MinFunc(candidates, func(a, b string) int {
		if c := cmp.Compare(g.Endpoints[b], g.Endpoints[a]); c != 0 {
			return c
		}
		if a == g.Current || b == g.Current {
			return cmp.Compare(boolRank(a == g.Current), boolRank(b == g.Current))
		}
		if c := bytes.Compare(rank(a, g.FirstIP), rank(b, g.FirstIP)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}), Reason: reason}
}

// boolRank orders true first.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// rank is the tie-breaker: sha256(nodeName + "#" + firstIP), lowest first.
func rank(node, ip string) []byte {
	h := sha256.Sum256([]byte(node + "#" + ip))
	return h[:]
}

// Eligible returns "" when n may announce g's address, and otherwise why not, as a phrase
// for people ("node-a is excluded ...").
func Eligible(g Group, n Node) string {
	switch {
	case n.Deleting:
		return n.Name + " is being deleted"
	case n.Labels.Has(ExcludeLabel):
		return fmt.Sprintf("%s is excluded by the label %s", n.Name, ExcludeLabel)
	case g.NodeSelector != nil && !g.NodeSelector.Matches(n.Labels):
		return n.Name + " does not match the pool's nodeSelector"
	case n.Draining:
		return n.Name + " agent is draining"
	case !n.Healthy:
		return n.Name + " agent not answering"
	}
	return ""
}

// Explain says, for people, why d differs from the previous announcer prev ("" for none).
func Explain(prev string, g Group, nodes []Node, d Decision) string {
	switch d.Reason {
	case ReasonNoEligibleNode:
		return "no node may announce: " + whyNone(g, nodes)
	case ReasonNoLocalEndpoints:
		return "externalTrafficPolicy is Local and no eligible node has a ready endpoint"
	}
	if prev == "" {
		return describe(d)
	}
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.Name == prev })
	switch {
	case i < 0:
		return prev + " is gone"
	case Eligible(g, nodes[i]) != "":
		return Eligible(g, nodes[i])
	case d.Reason == ReasonPreferred:
		return fmt.Sprintf("preferred node %s became eligible", d.Node)
	case g.Endpoints[prev] == 0 && g.Endpoints[d.Node] > 0:
		return prev + " has no ready endpoint"
	case g.Endpoints[d.Node] > g.Endpoints[prev]:
		return fmt.Sprintf("%s has more ready endpoints (%d) than %s (%d)", d.Node, g.Endpoints[d.Node], prev, g.Endpoints[prev])
	}
	return describe(d)
}

func describe(d Decision) string {
	switch d.Reason {
	case ReasonPreferred:
		return d.Node + " is the first eligible preferred node"
	case ReasonNoEndpoints:
		return "no node has a ready endpoint; " + d.Node + " is eligible"
	}
	return d.Node + " has ready endpoints"
}

// whyNone lists why each node is not eligible.
func whyNone(g Group, nodes []Node) string {
	if len(nodes) == 0 {
		return "there are no nodes"
	}
	var why []string
	for _, n := range nodes {
		why = append(why, Eligible(g, n))
	}
	slices.Sort(why)
	if len(why) > 3 {
		why = append(why[:3], fmt.Sprintf("and %d more", len(why)-3))
	}
	return strings.Join(why, ", ")
}
