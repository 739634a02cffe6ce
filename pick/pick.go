// Package pick holds the rule that picks the one node announcing an address: a pure,
// deterministic function of the Services sharing the address, their ready endpoints per
// node, and the nodes. The ccm applies it; nothing about it needs Kubernetes to test.
package pick

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// ExcludeLabel keeps a node from announcing any address, as it keeps it out of every
// cloud load balancer.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// OutOfServiceTaint marks a node an operator says is down (v1.TaintNodeOutOfService).
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// Node is what the rule needs to know about a node.
type Node struct {
	Name     string
	Labels   labels.Set
	Deleting bool // has a deletion timestamp
	// OutOfService says the Node has the taint node.kubernetes.io/out-of-service: an
	// operator says it is down, whatever its agent answers.
	OutOfService bool
	// Drained says, for people, why an operator drained the node ("by the annotation
	// lb.baremetal.io/drain", as annotation.Maintenance words it), or "" when not: every
	// address leaves it, and none comes to it.
	Drained string
	// Healthy says the node's agent answers the ccm's probes and can reach the network.
	Healthy bool
	// Draining says the node's agent answers that it is shutting down; such a node is not
	// Healthy.
	Draining bool
	// Starting says the node's agent answers that it cannot announce yet; such a node is
	// not Healthy.
	Starting bool
	// Unable are the pools and families the node's agent says it cannot announce now: a
	// node is a candidate only for groups it can announce every address of.
	Unable []Unable
}

// Unable is a pool and family a node's agent cannot announce now, and why.
type Unable struct {
	Pool   string
	Family iprange.Family
	// Why says it for people: "node-a has no IPv6 address on eth0".
	Why string
}

// Group is the Services that share one address, or a single Service. They always get the
// same announcer.
type Group struct {
	// FirstIP is the group's first address, as text; it salts the hash that spreads
	// announcers over nodes, and keeps the Services of one address together.
	FirstIP string
	// Local holds the group's Services with externalTrafficPolicy Local, each with its own
	// endpoints. Such a Service's traffic is dropped on a node without a ready endpoint of
	// that very Service, so only a node with one of every Local Service may announce;
	// endpoints summed over the group would let a node with only another Service's pods
	// win. Empty when every Service of the group is Cluster.
	Local []LocalService
	// PreferredNodes are node names in order of preference.
	PreferredNodes []string
	// Endpoints counts the ready, non-terminating endpoints of all the group's Services,
	// Local or not, per node name: it ranks the candidates, so the address goes where
	// most of the group's traffic can be served without another hop.
	Endpoints map[string]int
	// Pools are the pools the group's addresses come from, in the order Eligible reports
	// them. A dual-stack Service may hold an address of each of two pools, and the one
	// announcer answers for all of them, so it must be let in by every pool.
	Pools []PoolNodes
	// Current is the node announcing now, or "". Among the candidates with the most ready
	// endpoints it keeps the address: a node that comes back after a failure does not take
	// its addresses back, which would break connections a second time. Leave it empty for
	// the pure hash order.
	Current string
	// Plan is the announcer and standbys the Services' annotations publish. When Current
	// is no longer a candidate, the first node of Plan among the best candidates takes
	// over: it is the node the agents chose on their own, from the same plan.
	Plan []string
}

// LocalService is a Service of the group with externalTrafficPolicy Local. It keeps its
// endpoints apart from the group's total because its traffic cannot leave the node that
// receives it: the announcer needs an endpoint of this Service, not just of the group.
type LocalService struct {
	Service   string         // namespace/name
	Endpoints map[string]int // its ready, non-terminating endpoints per node name
}

// PoolNodes is a pool of the group's addresses and the nodes it lets announce them. An
// operator limits a pool to the nodes attached to its network, and a node outside it
// could not reach the clients of the address.
type PoolNodes struct {
	Pool         string
	NodeSelector labels.Selector // nil selects every node
	// Families says, by iprange.Family, which families of the pool's addresses the group
	// holds: a node must be able to announce those.
	Families [2]bool
}

// Reason says, for machines, why a node was chosen or none was.
type Reason string

// The reasons of a Decision.
const (
	// ReasonPreferred: the first eligible node of PreferredNodes that is a candidate.
	ReasonPreferred Reason = "PreferredNode"
	// ReasonEndpoints: the candidate with the most ready endpoints, ties broken by the
	// current announcer, then by hash.
	ReasonEndpoints Reason = "ReadyEndpoints"
	// ReasonStandby: the announcer went down and the first standby of the published plan
	// that is among the best candidates took over, as the agents did on their own.
	ReasonStandby Reason = "Standby"
	// ReasonBalance: the announcer held more groups than its bound (Assign), and this
	// group moved to an equal candidate under its own.
	ReasonBalance Reason = "Balance"
	// ReasonNoEndpoints: a Cluster group without ready endpoints anywhere; any eligible node.
	ReasonNoEndpoints Reason = "NoReadyEndpoints"
	// ReasonNoEligibleNode: no node may announce.
	ReasonNoEligibleNode Reason = "NoEligibleNode"
	// ReasonNoLocalEndpoints: a Local group where no eligible node has a ready endpoint of
	// every Local Service.
	ReasonNoLocalEndpoints Reason = "NoLocalEndpoints"
)

// Decision is the outcome of Select: the announcing node, or "" when none may announce.
type Decision struct {
	Node   string
	Reason Reason
	// Why says, for ReasonBalance, which loads moved the group, as Ranking.Why.
	Why string
}

// Select picks the node that announces g's address among nodes. The order of nodes, of
// g.Local and of g.Pools does not matter, so every replica of the ccm, listing them from
// its own caches, agrees.
func Select(g Group, nodes []Node) Decision {
	ranked, reason := Rank(g, nodes)
	if len(ranked) == 0 {
		return Decision{Reason: reason}
	}
	return Decision{Node: ranked[0], Reason: reason}
}

// Rank orders the nodes that may announce g's address, best first, and says why the first
// is first: the first is Select's choice, the rest, in order, are its standbys. While the
// current announcer is a candidate, removing any node from nodes leaves the order of the
// others as it was, so the standbys of a dead announcer take over in the order the ccm
// published. Once it is not, the first node of g.Plan among the best candidates moves to
// the front, the others keeping their order: the node the agents chose on their own.
// Rank is the rule for one group alone; Assign applies it to every group at once, choosing
// among the nodes Rank holds equal so that no node holds far more than its share.
func Rank(g Group, nodes []Node) ([]string, Reason) {
	var eligible []string
	for _, i := range able(g, nodes) {
		eligible = append(eligible, nodes[i].Name)
	}
	if len(eligible) == 0 {
		return nil, ReasonNoEligibleNode
	}
	// Candidates come first; for a Cluster group, the eligible nodes without endpoints
	// follow, as they would be chosen once no candidate is left.
	var first, rest []string
	if len(g.Local) > 0 {
		first = slices.DeleteFunc(eligible, func(n string) bool { return len(missingLocal(g, n)) > 0 })
		if len(first) == 0 {
			return nil, ReasonNoLocalEndpoints
		}
	} else {
		for _, n := range eligible {
			if g.Endpoints[n] > 0 {
				first = append(first, n)
			} else {
				rest = append(rest, n)
			}
		}
	}
	ip := hash64(g.FirstIP)
	order := func(a, b string) int {
		if c := cmp.Compare(preference(g, a), preference(g, b)); c != 0 {
			return c
		}
		if c := cmp.Compare(g.Endpoints[b], g.Endpoints[a]); c != 0 {
			return c
		}
		if a == g.Current || b == g.Current {
			return cmp.Compare(boolRank(a == g.Current), boolRank(b == g.Current))
		}
		if c := cmp.Compare(score(hash64(a), ip), score(hash64(b), ip)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	slices.SortFunc(first, order)
	slices.SortFunc(rest, order)
	reason := ReasonEndpoints
	if len(first) == 0 {
		first, rest, reason = rest, nil, ReasonNoEndpoints
	}
	if preference(g, first[0]) < len(g.PreferredNodes) {
		reason = ReasonPreferred
	}
	// The current announcer gone, the first of the published plan left among the best
	// takes over: the agents did so already, without the ccm.
	if g.Current != "" && !slices.Contains(first, g.Current) {
		for _, n := range g.Plan {
			if i := slices.Index(first, n); i >= 0 {
				first = append([]string{n}, slices.Delete(first, i, i+1)...)
				reason = ReasonStandby
				break
			}
		}
	}
	return append(first, rest...), reason
}

// preference is n's place in g.PreferredNodes, or their number when it is not preferred.
func preference(g Group, n string) int {
	if i := slices.Index(g.PreferredNodes, n); i >= 0 {
		return i
	}
	return len(g.PreferredNodes)
}

// missingLocal returns the Local Services of g without a ready endpoint on node, sorted.
func missingLocal(g Group, node string) []string {
	var out []string
	for _, l := range g.Local {
		if l.Endpoints[node] <= 0 {
			out = append(out, l.Service)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// boolRank orders true first.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// Eligible returns "" when n may announce every address of g, and otherwise why not, as
// a phrase for people ("node-a is excluded ...").
func Eligible(g Group, n Node) string {
	if why := barred(g, n); why != "" {
		return why
	}
	return unable(g, n)
}

// barred returns why n may announce none of g's addresses, whatever its links, or "".
func barred(g Group, n Node) string {
	switch {
	case n.Deleting:
		return n.Name + " is being deleted"
	case n.OutOfService:
		return fmt.Sprintf("%s is out of service by the taint %s", n.Name, OutOfServiceTaint)
	case n.Labels.Has(ExcludeLabel):
		return fmt.Sprintf("%s is excluded by the label %s", n.Name, ExcludeLabel)
	case n.Drained != "":
		return n.Name + " is drained " + n.Drained
	case excludedBy(g, n) != "":
		return fmt.Sprintf("%s does not match the nodeSelector of pool %s", n.Name, excludedBy(g, n))
	case n.Draining:
		return n.Name + " agent is draining"
	case n.Starting:
		return n.Name + " agent is starting"
	case !n.Healthy:
		return n.Name + " agent not answering"
	}
	return ""
}

// unable returns why n cannot announce a pool and family of g's addresses, or "".
func unable(g Group, n Node) string {
	if u := Unserved(g, n); len(u) > 0 {
		return u[0].Why
	}
	return ""
}

// excludedBy returns the first pool of g whose nodeSelector n does not match, or "".
func excludedBy(g Group, n Node) string {
	for _, p := range g.Pools {
		if p.NodeSelector != nil && !p.NodeSelector.Matches(n.Labels) {
			return p.Pool
		}
	}
	return ""
}

// Explain says, for people, why d differs from the previous announcer prev ("" for none).
func Explain(prev string, g Group, nodes []Node, d Decision) string {
	switch d.Reason {
	case ReasonNoEligibleNode:
		return "no node may announce: " + whyNone(g, nodes)
	case ReasonNoLocalEndpoints:
		return "externalTrafficPolicy is Local and no eligible node has a ready endpoint" + noCommonNode(g, nodes)
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
	case len(missingLocal(g, prev)) > 0:
		return prev + " has no ready endpoint of " + few(missingLocal(g, prev))
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
	case ReasonStandby:
		return d.Node + " is the first standby that can announce"
	case ReasonBalance:
		return d.Why
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
	return few(why)
}

// noCommonNode completes the sentence of ReasonNoLocalEndpoints: the one Local Service, or
// each Local Service with the eligible nodes it has ready endpoints on, so that people see
// which Services have no node in common.
func noCommonNode(g Group, nodes []Node) string {
	services := map[string][]string{}
	for _, l := range g.Local {
		services[l.Service] = nil
	}
	for _, n := range nodes {
		if Eligible(g, n) != "" {
			continue
		}
		for _, l := range g.Local {
			if l.Endpoints[n.Name] > 0 && !slices.Contains(services[l.Service], n.Name) {
				services[l.Service] = append(services[l.Service], n.Name)
			}
		}
	}
	names := slices.Sorted(maps.Keys(services))
	switch len(names) {
	case 0:
		return ""
	case 1:
		return " of " + names[0]
	}
	var each []string
	for _, s := range names {
		if on := services[s]; len(on) > 0 {
			each = append(each, s+" has ready endpoints on "+few(on))
		} else {
			each = append(each, s+" has none on an eligible node")
		}
	}
	return " of every Local Service: " + strings.Join(each, "; ")
}

// few sorts items and joins them, at most three then "and N more", to keep a sentence
// readable in an event when a cluster has many nodes.
func few(items []string) string {
	items = slices.Sorted(slices.Values(items))
	if len(items) > 3 {
		items = append(items[:3], fmt.Sprintf("and %d more", len(items)-3))
	}
	return strings.Join(items, ", ")
}
