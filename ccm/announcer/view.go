package announcer

import (
	"slices"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// Decision is the announcer's last decision for a Service's address group.
type Decision struct {
	// Node is the node chosen, "" when none may announce.
	Node string
	// Reason says why, for machines, as in baremetal_ccm_announcer_changes_total.
	Reason string
	// Why says why, for people, as the AnnouncerChanged and NoAnnouncer events do.
	Why string
	// Since is when this ccm made the decision.
	Since time.Time
}

// Change is a change of a Service's announcer, or a NoAnnouncer or PartlyAnnounced
// warning, as the event on the Service said.
type Change struct {
	Time    time.Time `json:"time"`
	Service string    `json:"service"` // namespace/name
	// Event is the event's reason: AnnouncerChanged, NoAnnouncer when no node may
	// announce, or PartlyAnnounced when no node may announce some of the addresses.
	Event  string `json:"event"`
	From   string `json:"from"` // "" for none
	To     string `json:"to"`   // "" for none
	Reason string `json:"reason"`
	Why    string `json:"why"`
}

// Snapshot is a copy of what the announcer decided, for the status page.
type Snapshot struct {
	// Decisions are the last decisions, by Service ("namespace/name").
	Decisions map[string]Decision
	// Announces counts, by node, the Services whose addresses the node announces.
	Announces map[string]int
	// Changes are the last announcer changes, the newest first.
	Changes []Change
}

// Snapshot returns a copy of the announcer's decisions. It holds the lock that every
// decision takes only for the copy.
func (c *Controller) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Decisions: map[string]Decision{}, Announces: map[string]int{}, Changes: c.changes.newestFirst()}
	for _, d := range c.decided {
		for _, svc := range d.services {
			s.Decisions[svc] = Decision{Node: d.node, Reason: string(d.reason), Why: d.why, Since: d.since}
		}
	}
	for _, o := range c.owned {
		if o.node != "" {
			s.Announces[o.node] += o.services
		}
	}
	return s
}

// Announcement is what the announcer decided for the addresses of one Service, as far as
// what the Service is told of its load balancer goes: its conditions are made from it.
type Announcement struct {
	// Node announces the Service's addresses; "" when no node may.
	Node string
	// Reason is the rule's reason for the decision (pick.Reason).
	Reason pick.Reason
	// Told says, when no node may announce, why, as the last NoAnnouncer event on the
	// Service did.
	Told string
	// Unannounced is what Node leaves without an announcer, as the PartlyAnnounced event
	// says it: "the IPv6 addresses of pool default: node-a has no IPv6 address on eth0".
	// Empty when Node announces every address.
	Unannounced string
	// OnlyUnable says, when no node may announce, that some would be eligible but for
	// their links: no up interface for a pool, or no address of a family on it.
	OnlyUnable bool
	// Isolated says that this ccm takes itself for cut off from the agents, Node's among
	// them: it keeps Node as the announcer, but cannot tell whether it still announces.
	Isolated bool
}

// Announcement returns the announcer's last decision for the Service "namespace/name";
// false when it has made none yet (it has no addresses, or the announcer has not decided
// its group since it started leading).
func (c *Controller) Announcement(service string) (Announcement, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, ok := c.groupOf[service]
	if !ok {
		return Announcement{}, false
	}
	d := c.decided[key]
	return Announcement{
		Node: d.node, Reason: d.reason, Told: d.told, Unannounced: d.unannounced, OnlyUnable: d.onlyUnable,
		Isolated: d.node != "" && slices.Contains(c.isolatedNodes, d.node),
	}, true
}

// OnAnnouncement registers f to be called with the Services ("namespace/name") whose
// Announcement changed. f must not block: it is called from the announcer's workers.
func (c *Controller) OnAnnouncement(f func(services []string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, f)
}

// announce tells the listeners that the Announcements of services changed. c.mu is not
// held.
func (c *Controller) announce(services []string) {
	if len(services) == 0 {
		return
	}
	c.mu.Lock()
	listeners := c.listeners
	c.mu.Unlock()
	for _, f := range listeners {
		f(services)
	}
}
