package announcer

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// A node whose agent flaps (down, up, down again: a link that comes and goes, an agent
// starved now and then) would have the standbys of every group it could stand by for
// written on each return and each loss: a write storm on the API server that protects
// nothing, since the verdict already tells the agents which standbys are down. So a node
// that comes back from down re-enters the standby lists only once it has been back for
// flapHold: one write when it goes down (its groups get another standby), one when it has
// held up. Announcers are chosen as before, at once: a group that needs an announcer takes
// the best node there is.

// flapHold is how long a node must have been back from down before a change of the
// standbys alone names it again.
const flapHold = 10 * time.Second

// returns remembers, as the announcer reads the agents' states, which nodes' agents are
// down and when each of the others last came back from down.
type returns struct {
	// hold is flapHold, shorter in tests.
	hold time.Duration

	mu sync.Mutex
	// down are the nodes read down last; back when each node read up after down was, for
	// hold.
	down map[string]bool
	back map[string]time.Time
}

// observe records a node's state as read at now.
func (r *returns) observe(node string, down bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down == nil {
		r.down, r.back = map[string]bool{}, map[string]time.Time{}
	}
	switch {
	case down:
		r.down[node] = true
	case r.down[node]:
		delete(r.down, node)
		r.back[node] = now
	}
	if at, ok := r.back[node]; ok && now.Sub(at) >= r.hold {
		delete(r.back, node)
	}
}

// holding returns, for each of nodes that came back from down less than the hold before
// now, how much of the hold is left.
func (r *returns) holding(nodes []string, now time.Time) map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]time.Duration
	for _, n := range nodes {
		if at, ok := r.back[n]; ok && now.Sub(at) < r.hold {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[n] = r.hold - now.Sub(at)
		}
	}
	return out
}

// holdStandbys returns how long to keep the standbys written, old, rather than write the
// ranking's, new, while the announcer stays: as long as every node new adds is held
// (holding: it came back from down lately) and every node it drops is still healthy
// (pushed out by one that came back, not lost). Zero means write now. nodes are sorted by
// name.
func holdStandbys(old, new []string, holding map[string]time.Duration, nodes []pick.Node) time.Duration {
	var hold time.Duration
	for _, n := range new {
		if slices.Contains(old, n) {
			continue
		}
		left, ok := holding[n]
		if !ok {
			return 0
		}
		hold = max(hold, left)
	}
	for _, n := range old {
		if slices.Contains(new, n) {
			continue
		}
		i, ok := slices.BinarySearchFunc(nodes, n, func(x pick.Node, name string) int { return strings.Compare(x.Name, name) })
		if !ok || !nodes[i].Healthy {
			return 0
		}
	}
	return hold
}
