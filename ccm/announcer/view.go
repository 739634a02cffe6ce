package announcer

import "time"

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
