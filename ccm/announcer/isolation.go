package announcer

import (
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
)

// Event reasons of the announcer about the ccm's own isolation from the agents: put on
// the Nodes whose agents it lost, since no Service moves.
const (
	ReasonProbesLost     = "ProbesLost"
	ReasonProbesRestored = "ProbesRestored"
)

// maxIsolationEvents is how many Nodes an isolation's event is put on: the rest are
// counted in its message, so that losing 5,000 agents makes no storm of events.
const maxIsolationEvents = 10

// IsolationSource is the prober's view of its own isolation: a *prober.Prober. A Health
// that is one too has the announcer tell of isolations in events.
type IsolationSource interface {
	// OnIsolation registers a function called when the prober takes itself for cut off
	// from the agents, and when it no longer does.
	OnIsolation(func(prober.Isolation))
}

// isolationChanged raises a Warning on the lost agents' Nodes when the prober takes
// itself for cut off, and a Normal event on the same Nodes when that ends.
func (c *Controller) isolationChanged(v prober.Isolation) {
	c.mu.Lock()
	nodes := v.Lost
	began := c.isolatedSince
	if v.Isolated {
		c.isolatedNodes, c.isolatedSince = v.Lost, v.Since
	} else {
		nodes = c.isolatedNodes
		c.isolatedNodes, c.isolatedSince = nil, time.Time{}
	}
	// The Services these nodes announce are announced, as far as this ccm can tell, only
	// while it is not cut off from them.
	var services []string
	for _, d := range c.decided {
		if d.node != "" && slices.Contains(nodes, d.node) {
			services = append(services, d.services...)
		}
	}
	c.mu.Unlock()
	c.announce(services)
	eventType, reason, message := isolationEvent(v, len(nodes), time.Since(began))
	for _, n := range nodes[:min(len(nodes), maxIsolationEvents)] {
		c.recorder.Event(nodeRef(n), eventType, reason, message)
	}
}

// isolationEvent returns the event of an isolation that began, or that ended after
// lasted; nodes is how many Nodes the event is about.
func isolationEvent(v prober.Isolation, nodes int, lasted time.Duration) (eventType, reason, message string) {
	more := ""
	if nodes > maxIsolationEvents {
		more = fmt.Sprintf(" (this event is on %d of the %d Nodes)", maxIsolationEvents, nodes)
	}
	if v.Isolated {
		return v1.EventTypeWarning, ReasonProbesLost, fmt.Sprintf(
			"The ccm lost %d of %d agents' probes within %v; it suspects its own network and keeps every announcer as it is%s",
			len(v.Lost), v.Probed, v.Window.Round(time.Millisecond), more)
	}
	still := ""
	if len(v.Lost) > 0 {
		still = fmt.Sprintf("; %d still do not answer and fail over as usual", len(v.Lost))
	}
	return v1.EventTypeNormal, ReasonProbesRestored, fmt.Sprintf(
		"The ccm hears most agents again after %v; it decides on their probes as usual%s%s",
		lasted.Round(time.Millisecond), still, more)
}
