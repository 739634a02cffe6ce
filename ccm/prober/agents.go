package prober

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Agent is what the prober knows of the probing of one node's agent.
type Agent struct {
	// Address is where the agent is probed.
	Address netip.AddrPort
	// LastRTT is the round trip of the last answered probe; 0 before any answer.
	LastRTT time.Duration
	// LastAnswer is when the last answer arrived; zero before any answer.
	LastAnswer time.Time
	// Covers are the nodes the agent's replies say it stands in for, sorted; a node not
	// probed shows as its NodeTag in hexadecimal.
	Covers []string
	// LastProbe is when the last probe ended, answered or not; zero before the first.
	LastProbe time.Time
	// Unable are the pools and families the agent cannot announce now.
	Unable []probe.Unable
	// ConfirmedOnly says the agent announces only what the ccm confirms: its own view of
	// the Services is not the ccm's.
	ConfirmedOnly bool
	// CacheVersion is the resourceVersion the agent's last reply said its Service cache
	// has reached.
	CacheVersion uint64
}

// Agents returns the probing of every agent probed now, by node name: a copy, for the
// status page.
func (p *Prober) Agents() map[string]Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Agent, len(p.agents))
	for node, a := range p.agents {
		pr := Agent{Address: a.addr, LastRTT: time.Duration(a.lastRTT.Load()), Covers: p.coverNamesLocked(a.covers), Unable: a.unable, ConfirmedOnly: a.confirmedOnly, CacheVersion: a.cacheVersion}
		if at := a.lastAnswer.Load(); at != 0 {
			pr.LastAnswer = time.Unix(0, at)
		}
		if at := a.lastProbe.Load(); at != 0 {
			pr.LastProbe = time.Unix(0, at)
		}
		out[node] = pr
	}
	return out
}

// coverNamesLocked returns the names of the nodes of tags, sorted, for people: a node
// the prober does not probe (one it has no address for, or deleted) shows as its tag.
func (p *Prober) coverNamesLocked(tags []uint64) []string {
	var out []string
	for _, t := range tags {
		if n, ok := p.names[t]; ok {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("%016x", t))
		}
	}
	slices.Sort(out)
	return out
}

// socketOf spreads the agents over n sockets by a hash of the node's name.
func socketOf(node string, n int) int {
	return int(cycle.Phase(node, time.Duration(n)))
}
