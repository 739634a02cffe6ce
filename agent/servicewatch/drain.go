package servicewatch

import (
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
)

// Drain keeps announcing every address announced so far, and adds those that come, until
// the agent exits: a draining node withdraws nothing, so that no address goes unanswered
// between this node seeing that it moved and the new announcer seeing it too.
func (w *Watcher) Drain() {
	w.draining.Store(true)
	w.queue.Add(everything)
}

// keep returns now with every address of was that now lacks, sorted as desired.Compute
// sorts.
func keep(was, now []desired.Address) []desired.Address {
	out := slices.Clone(now)
	for _, a := range was {
		if !slices.ContainsFunc(out, func(b desired.Address) bool { return b.Addr == a.Addr }) {
			a.Lingering = true
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b desired.Address) int { return a.Addr.Compare(b.Addr) })
	return out
}

// DrainLinger is how long the agent of a drained node (lb.baremetal.io/drain, or cordoned
// under maintenance.drainOnCordon) keeps answering for an address that moved away from
// it, announcing nothing. The ccm moves the address by writing the Services' plan; this
// agent may see that before the new announcer's agent does, and the new one may learn it
// only from the ccm's duty (a watch that lags: DutyTolerance, then a probe). Until then a
// client that asks for the address must still get an answer, and traffic that reaches
// this node is still handed to the Service: the new announcer announces before this node
// stops answering, as on an agent's shutdown.
//
// It stays under the 2 s over which the new announcer repeats its announcements, so that a
// client that took this node's answer during the linger hears the new announcer after it.
const DrainLinger = 1500 * time.Millisecond

// lingerSet follows the addresses that left this node lately, to keep answering for them
// while the node is drained. Only sync touches it.
type lingerSet struct {
	node  string
	bound time.Duration
	// left are the addresses withdrawn within bound, each with when its linger ends.
	// They are followed whether the node is drained or not: the Node's drain annotation
	// and the Services' new plan come on two watches, and the plan may come first.
	left map[netip.Addr]lingering
}

type lingering struct {
	addr  desired.Address
	until time.Time
}

// apply returns now, with the addresses of was that left it within the bound added as
// lingering (answered, never announced) while drained, sorted as desired.Compute sorts;
// and when the first of those stops, zero for none. was is what the speaker was last
// given, at is the time.
func (l *lingerSet) apply(was, now []desired.Address, drained bool, at time.Time) ([]desired.Address, time.Time) {
	if l.left == nil {
		l.left = map[netip.Addr]lingering{}
	}
	has := func(list []desired.Address, a netip.Addr) bool {
		return slices.ContainsFunc(list, func(b desired.Address) bool { return b.Addr == a })
	}
	for _, a := range was {
		// One that lingered already left before: its bound runs from then.
		if a.Lingering || has(now, a.Addr) {
			continue
		}
		if _, ok := l.left[a.Addr]; ok {
			continue
		}
		a.Lingering, a.Covers = true, nil
		l.left[a.Addr] = lingering{addr: a, until: at.Add(l.bound)}
		if drained {
			klog.V(2).InfoS("Answering a moment longer for an address that left this drained node", "node", l.node, "address", a.Addr, "for", l.bound)
		}
	}
	out := slices.Clone(now)
	var next time.Time
	for addr, g := range l.left {
		if has(now, addr) || !at.Before(g.until) {
			delete(l.left, addr)
			continue
		}
		if !drained {
			continue
		}
		out = append(out, g.addr)
		if next.IsZero() || g.until.Before(next) {
			next = g.until
		}
	}
	slices.SortFunc(out, func(a, b desired.Address) int { return a.Addr.Compare(b.Addr) })
	return out, next
}
