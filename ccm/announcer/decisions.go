package announcer

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// decision is a group's last decision and the sentence that explains it.
type decision struct {
	node   string
	reason pick.Reason
	// why is pick.Explain's sentence: why the group moved to node, as in the event, or
	// why node has it when this ccm found it there.
	why string
	// since is when this ccm first made this decision (node and reason).
	since time.Time
	// services are the group's members, "namespace/name".
	services []string
	// unannounced is pick.Unannounced: what node leaves without an announcer, or "".
	unannounced string
	// told is why as the group's last NoAnnouncer event said it: with no announcer, why is
	// written anew at every decision, as the nodes' states change, the event only when
	// the reason does.
	told string
	// onlyUnable is pick.OnlyUnable when no node may announce: the nodes' links keep them
	// out, not their states.
	onlyUnable bool
}

// announces reports whether a and b tell a Service the same about its announcer: its
// conditions follow from that.
func (a decision) announces(b decision) bool {
	return a.node == b.node && a.reason == b.reason && a.told == b.told &&
		a.unannounced == b.unannounced && a.onlyUnable == b.onlyUnable
}

// ownership is a group's announcer ("" for none) and how many Services it holds.
type ownership struct {
	node     string
	services int
}

// remember records the group's decision with the sentence that explains it, and reports
// whether a NoAnnouncer or PartlyAnnounced warning is due: on the first decision of the
// group, and whenever the reason, what keeps the nodes out (their links or not) or what
// the announcer leaves unannounced changes.
func (c *Controller) remember(key string, members []member, g pick.Group, nodes []pick.Node, d pick.Decision, unannounced string) bool {
	services := make([]string, len(members))
	for i, m := range members {
		services[i] = m.req.Service
	}
	c.mu.Lock()
	last, seen := c.decided[key]
	c.mu.Unlock()
	kept := seen && last.node == d.Node && last.reason == d.Reason
	same := kept && last.unannounced == unannounced
	// A kept announcer keeps the sentence of the change that brought it there, as its
	// event said it. With no announcer the sentence lists what keeps each node out, which
	// changes under the same reason, so it is written anew.
	if same && d.Node != "" {
		now := last
		now.services = services
		c.decide(key, now)
		return false
	}
	now := decision{node: d.Node, reason: d.Reason, since: last.since, services: services, unannounced: unannounced}
	if d.Node == "" {
		now.onlyUnable = pick.OnlyUnable(g, nodes)
	}
	if !kept {
		now.since = time.Now()
	}
	// The node the group moves from: the last decision, or, on this ccm's first decision,
	// the node the annotations name.
	prev := last.node
	if !seen {
		prev = c.current(key, members)
	}
	if prev == d.Node {
		prev = "" // nothing moved: explain the choice itself
	}
	now.why = pick.Explain(prev, g, nodes, d)
	warn := !seen || last.reason != d.Reason || last.unannounced != unannounced || last.onlyUnable != now.onlyUnable
	now.told = last.told
	if warn {
		now.told = now.why
	}
	c.decide(key, now)
	return warn
}

// decide records d as the group's decision, and tells the listeners of the Services
// whose announcement it changes: all of the group's, old and new, when what it tells them
// changed, else those that joined or left it.
func (c *Controller) decide(key string, d decision) {
	c.mu.Lock()
	last, seen := c.decided[key]
	c.decided[key] = d
	for _, s := range last.services {
		if c.groupOf[s] == key {
			delete(c.groupOf, s)
		}
	}
	for _, s := range d.services {
		c.groupOf[s] = key
	}
	var changed []string
	if !seen || !last.announces(d) {
		changed = append(slices.Clone(d.services), last.services...)
	} else {
		changed = symmetricDifference(last.services, d.services)
	}
	c.mu.Unlock()
	c.announce(changed)
}

// symmetricDifference returns what is in a or in b but not in both.
func symmetricDifference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			out = append(out, s)
		}
	}
	return out
}

// logChange keeps an announcer change, or a NoAnnouncer warning, for the status page.
func (c *Controller) logChange(service, event, from string, d pick.Decision, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes.add(Change{
		Time: time.Now(), Service: service, Event: event,
		From: from, To: d.Node, Reason: string(d.Reason), Why: why,
	})
}

// hold records the nodes the group's annotations still name though the group moved
// away from them, to node to, because their agents are down (or replaced). The verdict
// keeps them down, so that their agents announce nothing and their standbys keep what
// they took, until the annotations say where the addresses went: without the API
// server that can be a long time, and an agent back in the meantime must not take them
// back, to lose them again when the annotation is written.
func (c *Controller) hold(key string, members []member, to string) {
	var nodes []string
	for _, m := range members {
		a := m.req.Announcer
		if a == "" || a == to || slices.Contains(nodes, a) {
			continue
		}
		if h := c.health.Health(a); h == liveness.Down || h == liveness.Starting || h == liveness.Replaced {
			nodes = append(nodes, a)
		}
	}
	slices.Sort(nodes)
	c.mu.Lock()
	was := c.held[key]
	if slices.Equal(was, nodes) {
		c.mu.Unlock()
		return
	}
	changed := false
	for _, n := range was {
		if c.heldBy[n]--; c.heldBy[n] <= 0 {
			// The annotations no longer name it: it may announce again once its agent
			// has seen them, that is once its cache is where this one is now.
			delete(c.heldBy, n)
			c.replaced[n] = c.cacheVersion()
			changed = true
		}
	}
	for _, n := range nodes {
		if c.heldBy[n]++; c.heldBy[n] == 1 {
			c.replaced[n] = prober.Held
			changed = true
		}
	}
	if len(nodes) == 0 {
		delete(c.held, key)
	} else {
		c.held[key] = nodes
	}
	var replaced map[string]uint64
	if changed {
		// Released nodes whose agents caught up are Up again: forget them.
		for n, v := range c.replaced {
			if v != prober.Held && c.health.Health(n) == liveness.Up {
				delete(c.replaced, n)
			}
		}
		replaced = maps.Clone(c.replaced)
	}
	c.mu.Unlock()
	if changed {
		c.health.SetReplaced(replaced)
	}
}

// cacheVersion returns the resourceVersion the Service cache has reached, as a number.
func (c *Controller) cacheVersion() uint64 {
	v, _ := strconv.ParseUint(c.serviceVersion(), 10, 64)
	return v
}

// forget drops what is known of a group that is gone, or that is decided under another
// name now.
func (c *Controller) forget(key string) {
	c.hold(key, nil, "")
	c.account(key, ownership{})
	c.mu.Lock()
	last := c.decided[key]
	delete(c.decided, key)
	for _, s := range last.services {
		if c.groupOf[s] == key {
			delete(c.groupOf, s)
		}
	}
	c.mu.Unlock()
	c.announce(last.services)
}

// account moves a group's Services in the gauges from its last decision to now.
func (c *Controller) account(key string, now ownership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.owned[key]
	if was == now {
		return
	}
	for _, o := range []struct {
		ownership
		sign float64
	}{{was, -1}, {now, 1}} {
		if o.services == 0 {
			continue
		}
		if o.node == "" {
			servicesWithoutAnnouncer.Add(o.sign * float64(o.services))
		} else {
			servicesPerAnnouncer.WithLabelValues(o.node).Add(o.sign * float64(o.services))
		}
	}
	if now.services == 0 {
		delete(c.owned, key)
	} else {
		c.owned[key] = now
	}
}

// maxChanges is how many announcer changes the status page lists: enough to see what a
// failover moved, little enough to keep in memory.
const maxChanges = 50

// changeLog keeps the last maxChanges announcer changes in a ring. Controller.mu guards
// it.
type changeLog struct {
	ring [maxChanges]Change
	n    int // changes ever added
}

func (l *changeLog) add(c Change) {
	l.ring[l.n%maxChanges] = c
	l.n++
}

// newestFirst returns the changes kept, the newest first.
func (l *changeLog) newestFirst() []Change {
	out := make([]Change, 0, min(l.n, maxChanges))
	for i := l.n - 1; i >= 0 && i >= l.n-maxChanges; i-- {
		out = append(out, l.ring[i%maxChanges])
	}
	return out
}
