package announcer

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// balanceKey queues deciding every group again, once Services or endpoints changed:
// their loads may move groups that nothing else queues.
const balanceKey = "balance"

// maxBalancePause is the longest a decision of every group is left stale. Deciding them
// all costs tens of milliseconds at thousands of Services, too much for each event: after
// one, the next waits balancePauses times as long as it took, so that deciding takes at
// most a fifth of a core, unless the nodes changed.
const (
	maxBalancePause = time.Second
	balancePauses   = 4
)

// spread is the last decision of every group at once (pick.Assign), which each group's
// sync applies to its own Services.
type spread struct {
	mu       sync.Mutex
	rankings map[string]pick.Ranking // by first address
	inputs   map[string]pick.Group   // what they were decided from
	nodes    []pick.Node
	at       time.Time     // when it was made
	took     time.Duration // how long it took
	// stale says that Services or endpoints changed since.
	stale atomic.Bool
}

// touch marks the decision of every group stale and queues deciding them again.
func (c *Controller) touch() {
	if !c.spread.stale.Swap(true) {
		c.queue.AddAfter(balanceKey, maxBalancePause)
	}
}

// wait is how long until the decision of every group may be made again. s.mu is held.
func (s *spread) wait() time.Duration {
	return min(maxBalancePause, balancePauses*s.took) - time.Since(s.at)
}

// ranking returns g's announcer and standbys, from the decision of every group: decided
// again at once when the nodes changed, else when g's own inputs changed or others did,
// once the pause after the last decision is over. Until then a group whose inputs changed
// is not decided: ok is false, and the group is queued again for then.
func (c *Controller) ranking(key string, g pick.Group, nodes []pick.Node) (r pick.Ranking, ok bool, err error) {
	s := &c.spread
	s.mu.Lock()
	defer s.mu.Unlock()
	in, known := s.inputs[g.FirstIP]
	changed := !known || !sameGroup(in, g)
	if s.rankings == nil || !slices.EqualFunc(s.nodes, nodes, sameNode) || (changed || s.stale.Load()) && s.wait() <= 0 {
		if err := c.decideAll(nodes); err != nil {
			return pick.Ranking{}, false, err
		}
	} else if changed {
		c.queue.AddAfter(key, s.wait())
		return pick.Ranking{}, false, nil
	}
	if r, ok := s.rankings[g.FirstIP]; ok {
		return r, true, nil
	}
	// The caches moved on while deciding: the group's next sync will find it.
	c.queue.AddAfter(key, s.wait())
	return pick.Ranking{}, false, nil
}

// syncBalance decides every group again if Services or endpoints changed since the last
// time, and queues those whose ranking changed.
func (c *Controller) syncBalance() error {
	if !c.spread.stale.Load() {
		return nil
	}
	nodes, err := c.nodeStates()
	if err != nil {
		return err
	}
	c.spread.mu.Lock()
	defer c.spread.mu.Unlock()
	return c.decideAll(nodes)
}

// decideAll decides every group with pick.Assign and queues those whose ranking changed.
// c.spread.mu is held.
func (c *Controller) decideAll(nodes []pick.Node) error {
	s := &c.spread
	s.stale.Store(false)
	start := time.Now()
	groups, err := c.allGroups()
	if err != nil {
		s.stale.Store(true)
		return err
	}
	rankings := pick.Assign(groups, nodes, c.options())
	changed := 0
	for ip, r := range rankings {
		if old, ok := s.rankings[ip]; ok && !slices.Equal(old.Nodes, r.Nodes) {
			c.queue.Add(addressKey(netip.MustParseAddr(ip)))
			changed++
		}
	}
	s.rankings, s.nodes, s.at, s.took = rankings, nodes, time.Now(), time.Since(start)
	s.inputs = make(map[string]pick.Group, len(groups))
	for _, g := range groups {
		s.inputs[g.FirstIP] = g
	}
	klog.V(4).InfoS("Decided every group", "groups", len(groups), "nodes", len(nodes), "changed", changed, "duration", time.Since(start))
	return nil
}

// options are the rule's options under the cloud-config.
func (c *Controller) options() pick.Options {
	return pick.Options{Rebalance: c.cfg.Load().Failover.Rebalance, Standbys: maxStandbys}
}

// allGroups returns the rule's view of every group with Services to announce.
func (c *Controller) allGroups() ([]pick.Group, error) {
	seen := map[netip.Addr]bool{}
	var groups []pick.Group
	for _, text := range c.serviceIndexer.ListIndexFuncValues(byAddress) {
		a, err := netip.ParseAddr(text)
		if err != nil || seen[a] {
			continue
		}
		seen[a] = true
		members, _, err := c.group(a)
		if err != nil {
			return nil, err
		}
		if len(members) == 0 {
			continue
		}
		for _, m := range members {
			for _, x := range m.req.Ingress {
				seen[x] = true
			}
		}
		g, err := c.ruleGroup(members)
		if err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// sameGroup reports whether a and b give the rule the same inputs, the current
// announcer and plan apart: those follow the rule's own decisions.
func sameGroup(a, b pick.Group) bool {
	return a.FirstIP == b.FirstIP && slices.Equal(a.PreferredNodes, b.PreferredNodes) &&
		maps.Equal(a.Endpoints, b.Endpoints) &&
		slices.EqualFunc(a.Local, b.Local, func(x, y pick.LocalService) bool {
			return x.Service == y.Service && maps.Equal(x.Endpoints, y.Endpoints)
		}) &&
		slices.EqualFunc(a.Pools, b.Pools, func(x, y pick.PoolNodes) bool {
			return x.Pool == y.Pool && x.Families == y.Families &&
				(x.NodeSelector == nil) == (y.NodeSelector == nil) &&
				(x.NodeSelector == nil || x.NodeSelector.String() == y.NodeSelector.String())
		})
}

// sameNode reports whether a and b are the same node in the same state.
func sameNode(a, b pick.Node) bool {
	return a.Name == b.Name && a.Deleting == b.Deleting && a.Healthy == b.Healthy &&
		a.OutOfService == b.OutOfService && a.Drained == b.Drained &&
		a.Draining == b.Draining && a.Starting == b.Starting && labels.Equals(a.Labels, b.Labels) &&
		slices.Equal(a.Unable, b.Unable)
}
