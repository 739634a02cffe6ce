package wirecheck

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

const (
	// tick is how often the check looks for addresses due: each is asked for at most
	// this late.
	tick = 250 * time.Millisecond
	// wait is how long a round waits for answers: a client kernel's first retry comes
	// after a second; an answer on a segment takes well under a millisecond.
	wait = 250 * time.Millisecond
	// retryWait is how long the second request of a round, for what the first left
	// unanswered, waits: a client kernel's own retry interval.
	retryWait = time.Second
	// misses is how many rounds in a row unanswered make an address dark.
	misses = 2
)

// Target is an address to check: one this node backs, where it asks for it, and the
// announcer's node's own address asked for beside it.
type Target struct {
	desired.Backed
	// Interface is where this node would announce the address, and asks for it.
	Interface net.Interface
	// Control is the announcer's node's own address of the family on the interface's
	// subnets, which its kernel answers for; invalid when it has none there, and then a
	// round counts when another address of it was answered.
	Control netip.Addr
}

// Options configure a Check.
type Options struct {
	// Dark is called when a target's address goes unanswered misses rounds in a row
	// while its control is answered. It must not block.
	Dark func(t Target)
	// Lit is called when a dark target's address is answered again.
	Lit func(t Target)
}

// A Check asks for the addresses this node backs on a schedule spread over an interval,
// and tells which go dark. Set gives it the targets; Run checks them.
type Check struct {
	opts Options
	node string

	mu       sync.Mutex
	interval time.Duration
	ranges   []iprange.Range
	targets  map[netip.Addr]*entry
	checkers map[checkerKey]*l2.Checker
	// controls holds the hardware address that answered for each control last.
	controls map[netip.Addr]net.HardwareAddr
	counts   [2][outcomes]uint64
	dark     int
}

type entry struct {
	Target
	due time.Time
	st  state
	// mac answered for the address last: the next round asks it alone, as a client
	// refreshing its entry does, so that no other host hears the check.
	mac net.HardwareAddr
}

type checkerKey struct {
	index  int
	mac    string
	family iprange.Family
}

// New returns a Check of node's targets, checking nothing until Set and Run.
func New(node string, opts Options) *Check {
	return &Check{opts: opts, node: node, targets: map[netip.Addr]*entry{}, checkers: map[checkerKey]*l2.Checker{}, controls: map[netip.Addr]net.HardwareAddr{}}
}

// SetInterval sets how often each address is asked for; 0 stops the check.
func (c *Check) SetInterval(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == c.interval {
		return
	}
	c.interval = d
	now := time.Now()
	for _, e := range c.targets {
		e.due = c.firstDue(e.Addr, now)
	}
}

// SetRanges sets the pools' ranges, whose answers the sockets let through.
func (c *Check) SetRanges(ranges []iprange.Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ranges = slices.Clone(ranges)
	c.filterLocked()
}

// Set makes targets the addresses checked. An address kept keeps its state and its place
// in the schedule.
func (c *Check) Set(targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	keep := make(map[netip.Addr]*entry, len(targets))
	for _, t := range targets {
		e := c.targets[t.Addr]
		if e == nil || e.Announcer != t.Announcer || e.Interface.Index != t.Interface.Index {
			if e != nil && e.st.dark {
				c.dark--
			}
			e = &entry{due: c.firstDue(t.Addr, now)}
		}
		e.Target = t
		keep[t.Addr] = e
	}
	for a, e := range c.targets {
		if keep[a] == nil && e.st.dark {
			c.dark--
		}
	}
	c.targets = keep
	controls := map[netip.Addr]bool{}
	for _, t := range targets {
		controls[t.Control] = true
	}
	for a := range c.controls {
		if !controls[a] {
			delete(c.controls, a)
		}
	}
	c.filterLocked()
}

// firstDue is addr's first round: at its own phase of the interval from now, so that the
// rounds of thousands of addresses come spread. c.mu is held.
func (c *Check) firstDue(addr netip.Addr, now time.Time) time.Time {
	if c.interval <= 0 {
		return time.Time{}
	}
	return now.Add(cycle.Phase(c.node+"/"+addr.String(), c.interval))
}

// Run checks the targets until ctx ends, then closes its sockets.
func (c *Check) Run(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	defer c.closeAll()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for k, round := range c.due(time.Now()) {
			c.check(ctx, k, round)
		}
	}
}

// due returns the targets due by now, by the socket they are asked for on, and sets
// their next round: an interval on, give or take a quarter of it.
func (c *Check) due(now time.Time) map[checkerKey][]Target {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.interval <= 0 {
		return nil
	}
	out := map[checkerKey][]Target{}
	for _, e := range c.targets {
		if e.due.IsZero() {
			e.due = c.firstDue(e.Addr, now)
		}
		if e.due.After(now) {
			continue
		}
		jitter := time.Duration(rand.Int64N(int64(c.interval/2))) - c.interval/4
		e.due = now.Add(c.interval + jitter)
		k := checkerKey{e.Interface.Index, string(e.Interface.HardwareAddr), iprange.FamilyOf(e.Addr)}
		out[k] = append(out[k], e.Target)
	}
	return out
}

// questions returns the requests of a round of targets: for each address, and for each
// control once, to the hardware address that answered it last, or to every host.
func (c *Check) questions(targets []Target) []l2.Question {
	c.mu.Lock()
	defer c.mu.Unlock()
	var qs []l2.Question
	asked := map[netip.Addr]bool{}
	for _, t := range targets {
		var to net.HardwareAddr
		if e := c.targets[t.Addr]; e != nil {
			to = e.mac
		}
		qs = append(qs, l2.Question{Addr: t.Addr, To: to})
		if t.Control.IsValid() && !asked[t.Control] {
			asked[t.Control] = true
			qs = append(qs, l2.Question{Addr: t.Control, To: c.controls[t.Control]})
		}
	}
	return qs
}

// learn keeps who answered each address of a round, for the next. c.mu is held.
func (c *Check) learn(answers map[netip.Addr][]net.HardwareAddr) {
	for a, macs := range answers {
		var mac net.HardwareAddr
		if len(macs) > 0 {
			mac = macs[0]
		}
		if e := c.targets[a]; e != nil {
			e.mac = mac
		} else {
			c.controls[a] = mac
		}
	}
}

// check runs one round of targets on the socket of k.
func (c *Check) check(ctx context.Context, k checkerKey, targets []Target) {
	ch, err := c.checker(k, targets[0].Interface)
	if err != nil {
		klog.ErrorS(err, "Cannot check addresses on the wire", "interface", targets[0].Interface.Name)
		return
	}
	ask := c.questions(targets)
	answers, err := ch.Ask(ctx, ask, wait)
	if err != nil {
		klog.V(2).InfoS("Cannot ask for addresses on the wire", "interface", targets[0].Interface.Name, "err", err)
		return
	}
	// An answer lost or late on a busy node or segment is no miss: what went unanswered
	// is asked for once more, with a client's patience, before it counts.
	var again []l2.Question
	for _, q := range ask {
		if len(answers[q.Addr]) == 0 {
			again = append(again, l2.Question{Addr: q.Addr})
		}
	}
	if len(again) > 0 {
		more, err := ch.Ask(ctx, again, retryWait)
		if err != nil {
			klog.V(2).InfoS("Cannot ask for addresses on the wire", "interface", targets[0].Interface.Name, "err", err)
			return
		}
		for a, m := range more {
			answers[a] = m
		}
	}
	// Without a control of its own, an address's round counts when another address of
	// the round was answered: this node hears the wire.
	heard := false
	for _, q := range ask {
		heard = heard || len(answers[q.Addr]) > 0
	}
	c.mu.Lock()
	c.learn(answers)
	type report struct {
		t      Target
		change Change
	}
	var reports []report
	for _, t := range targets {
		e := c.targets[t.Addr]
		if e == nil {
			continue
		}
		control := heard
		if t.Control.IsValid() {
			control = len(answers[t.Control]) > 0
		}
		o := outcome(len(answers[t.Addr]) > 0, control)
		c.counts[k.family][o]++
		switch judge(&e.st, o, misses) {
		case Dark:
			c.dark++
			reports = append(reports, report{t, Dark})
		case Lit:
			c.dark--
			reports = append(reports, report{t, Lit})
		}
	}
	c.mu.Unlock()
	for _, r := range reports {
		if r.change == Dark {
			klog.InfoS("An address this node backs goes unanswered on the wire, while its announcer's node answers for its own", "address", r.t.Addr, "announcer", r.t.Announcer, "control", r.t.Control, "interface", r.t.Interface.Name, "rounds", misses, "services", r.t.Services)
			if c.opts.Dark != nil {
				c.opts.Dark(r.t)
			}
			continue
		}
		klog.InfoS("An address this node backs is answered on the wire again", "address", r.t.Addr, "announcer", r.t.Announcer, "interface", r.t.Interface.Name)
		if c.opts.Lit != nil {
			c.opts.Lit(r.t)
		}
	}
}
