// Package liveness is what the ccm's prober and an agent's checks of its peers share: the
// states of an agent, the rule that judges one from its probes' outcomes, where a node's
// agent is reached, and the signs of life that tell a busy node from a dead one (ICMP
// echoes, and the port unreachable of an agent gone from a live node).
package liveness

import (
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// State is what a prober knows of a node's agent.
type State int

// The states of an agent.
const (
	// Unknown: not probed long enough to say.
	Unknown State = iota
	// Up: answering, ready.
	Up
	// Down: not answering (or the node has no address to probe).
	Down
	// Draining: answering, but shutting down.
	Draining
	// Starting: answering, but not ready to announce (its Service cache has not synced):
	// in the verdict, so that its standbys announce what it would.
	Starting
	// Replaced: the ccm's judgement of an agent that answers, but that the announcer moved
	// addresses away from while it was down, and that Services' annotations still name
	// (the API server is away, or the patches are on their way), or that another agent
	// stands in for. It stays in the verdict, so that it announces nothing and its
	// standbys keep what they took, until the annotations caught up.
	Replaced
)

// String returns the state in lower case, as in metrics labels.
func (s State) String() string {
	return [...]string{"unknown", "up", "down", "draining", "starting", "replaced"}[s]
}

// AgentAddr returns the address a node's agent is reached at: the node's first
// InternalIP that parses. The ccm probes there, agents probe their peers there, and the
// agent listens there by default: one rule, so that all three always agree.
func AgentAddr(n *v1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// AgentAddrPort returns where node's agent answers: AgentAddr at the agents' port.
func AgentAddrPort(n *v1.Node, port int) (netip.AddrPort, bool) {
	ip, ok := AgentAddr(n)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, uint16(port)), true
}

// MaxBackoffIntervals caps the time between two attempts to probe an agent whose probes
// cannot even be sent (no route to it, a firewall on this host): a few intervals, so that
// the agent is found again soon after the network comes back.
const MaxBackoffIntervals = 4

// Backoff returns the wait before the next attempt to probe an agent after errs attempts
// in a row could not be sent, failureThreshold of them making it down: the first ones are
// the usual rapid re-probes (the caller's), then one interval, doubling up to a cap.
func Backoff(errs, failureThreshold int, interval time.Duration) time.Duration {
	k := min(max(errs-failureThreshold, 0), 8)
	return min(interval<<k, MaxBackoffIntervals*interval)
}

// FollowNodes calls synced with every node the informer adds or updates, and deleted
// with the name of every node it deletes: where a prober learns whose agents to probe,
// and at which address.
func FollowNodes(nodes cache.SharedIndexInformer, synced func(*v1.Node), deleted func(name string)) error {
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok {
				synced(n)
			}
		},
		UpdateFunc: func(_, cur any) {
			if n, ok := cur.(*v1.Node); ok {
				synced(n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*v1.Node); ok {
				deleted(n.Name)
			}
		},
	})
	return err
}
