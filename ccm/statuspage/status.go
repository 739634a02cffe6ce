// Package statuspage is the ccm's read-only status page: the leader's pools, the Services
// it gave addresses to with the node announcing them and why, the node agents it probes,
// and its last announcer changes. It is built from small read-only views of the
// allocator, the announcer and the prober, and from the informer caches: building it
// costs no API request and takes none of their locks for longer than a copy.
package statuspage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

// Allocator is the page's view of the allocator: a *provider.Cloud.
type Allocator interface {
	// Pools returns the figures of every family of every pool, in config order.
	Pools() []ipam.Stats
	// Restored reports whether the allocator holds the addresses of the Services' status.
	Restored() bool
	// Config returns the cloud-config in use.
	Config() *config.Config
}

// Announcer is the page's view of the announcer: an *announcer.Controller.
type Announcer interface {
	// Snapshot returns a copy of the announcer's decisions.
	Snapshot() announcer.Snapshot
	// HasSynced reports whether the announcer decides on a full view.
	HasSynced() bool
}

// Agents is the page's view of the prober: a *prober.Prober.
type Agents interface {
	// Health returns the state of a node's agent.
	Health(node string) liveness.State
	// Agents returns the probing of every agent probed now, by node name.
	Agents() map[string]prober.Agent
}

// Sources are what a leader's page is built from.
type Sources struct {
	Allocator Allocator
	Announcer Announcer
	Agents    Agents
	Services  corelisters.ServiceLister
	Nodes     corelisters.NodeLister
}

// Page is the status page of one ccm replica. It answers as a standby until Lead.
type Page struct {
	sources atomic.Pointer[Sources]
}

// New returns the page of a replica that does not lead yet.
func New() *Page { return &Page{} }

// Lead makes the page show what s knows: this replica leads now.
func (p *Page) Lead(s *Sources) { p.sources.Store(s) }

// Status is what the status page shows. It is read from memory and the informer caches.
type Status struct {
	// Leader is true: a standby answers with a standbyStatus instead.
	Leader bool `json:"leader"`
	// Replica is the host name of the process: in a cluster, the ccm pod's name.
	Replica string    `json:"replica"`
	Time    time.Time `json:"time"`
	// Synced is false while this leader is still filling its caches, probing the agents
	// for the first time or restoring the addresses recorded in the Services' status: until
	// then Services, agents and used addresses may be missing.
	Synced   bool            `json:"synced"`
	Pools    []PoolStatus    `json:"pools"`
	Services []ServiceStatus `json:"services"`
	Agents   []AgentStatus   `json:"agents"`
	// Isolation is set while the prober takes itself for cut off from the agents.
	Isolation     *IsolationStatus   `json:"isolation,omitempty"`
	RecentChanges []announcer.Change `json:"recentChanges"`
}

// IsolationStatus is the prober's isolation under way: more than failover.isolationShare
// of the agents stopped answering at once, and every agent keeps its state.
type IsolationStatus struct {
	Since time.Time `json:"since"`
	// Lost is how many agents have not answered their last probe, of Probed.
	Lost   int `json:"lost"`
	Probed int `json:"probed"`
}

// IsolationSource is the prober's view of its own isolation: a *prober.Prober. Agents
// that are one too show it on the page.
type IsolationSource interface {
	// Isolation returns whether the prober takes itself for cut off, and the agents lost.
	Isolation() prober.Isolation
}

// PoolStatus is one pool of the cloud-config, in file order.
type PoolStatus struct {
	Name     string             `json:"name"`
	Families []PoolFamilyStatus `json:"families"`
}

// PoolFamilyStatus is one family of a pool, from the allocator's Stats, as the
// baremetal_ccm_pool_addresses gauges are. Size and Free are exact: an IPv6 pool's may
// exceed what a float64 holds.
type PoolFamilyStatus struct {
	Family string      `json:"family"` // IPv4 or IPv6
	Size   json.Number `json:"size"`
	Used   int         `json:"used"`
	Free   json.Number `json:"free"`

	size *big.Int
}

// Usage is the share of the family's addresses in use, for people.
func (f PoolFamilyStatus) Usage() string {
	if f.size == nil || f.size.Sign() == 0 {
		return ""
	}
	pct, _ := new(big.Float).Quo(new(big.Float).SetInt64(int64(f.Used)*100), new(big.Float).SetInt(f.size)).Float64()
	if f.Used > 0 && pct < 0.1 {
		return "<0.1%" // of a /64, any number of Services
	}
	return fmt.Sprintf("%.1f%%", pct)
}

// ServiceStatus is a Service that holds addresses, and who announces them.
type ServiceStatus struct {
	Namespace  string   `json:"namespace"`
	Name       string   `json:"name"`
	Addresses  []string `json:"addresses"`
	Pool       string   `json:"pool,omitempty"` // of the first address
	SharingKey string   `json:"sharingKey,omitempty"`
	// Announcer is the node the announcer annotation names, which is what the agents
	// follow; "" when none may announce.
	Announcer string `json:"announcer"`
	// Decided is this ccm's decision when it differs from Announcer: the annotation is
	// being written, or failing to be (the log says why).
	Decided *string `json:"decided,omitempty"`
	// Reason (for machines, as in baremetal_ccm_announcer_changes_total) and Why (for
	// people, as in the AnnouncerChanged and NoAnnouncer events) explain the decision;
	// Since is when this ccm made it. All are empty until the Service's address group is
	// first decided.
	Reason string    `json:"reason,omitempty"`
	Why    string    `json:"why,omitempty"`
	Since  time.Time `json:"since,omitzero"`
}

// Pending reports whether the annotation does not yet say what this ccm decided.
func (s ServiceStatus) Pending() bool { return s.Decided != nil }

// DecidedNode is Decided, "" when nil.
func (s ServiceStatus) DecidedNode() string {
	if s.Decided == nil {
		return ""
	}
	return *s.Decided
}

// AgentStatus is a node and what the prober knows of its agent.
type AgentStatus struct {
	Node string `json:"node"`
	// State is up, down, draining, replaced or unknown, as in the baremetal_ccm_agents
	// gauge.
	State string `json:"state"`
	// Address is where the agent is probed; empty when it is not, for a node without an
	// InternalIP.
	Address string `json:"address,omitempty"`
	// LastRTTSeconds is the round trip of the last answered probe, at LastAnswer.
	LastRTTSeconds float64   `json:"lastRTTSeconds,omitzero"`
	LastAnswer     time.Time `json:"lastAnswer,omitzero"`
	// Services counts the Services whose addresses the node announces.
	Services int `json:"services"`
	// Covers are the nodes the agent says it announces addresses of in their stead,
	// against the annotations: it took over while they were down.
	Covers []string `json:"covers,omitempty"`
	// Unable says what the agent cannot announce now, one sentence a pool and family
	// ("node-a has no IPv6 address on eth0"): those addresses go to other nodes.
	Unable []string `json:"unable,omitempty"`
	// ConfirmedOnly says the agent announces only what this ccm's duty confirms: its own
	// view of the Services differs (its watch is broken, or its cache behind).
	ConfirmedOnly bool `json:"confirmedOnly,omitzero"`

	rtt time.Duration
}

// RTT is LastRTTSeconds for people, "" before any answer.
func (a AgentStatus) RTT() string {
	if a.rtt == 0 {
		return ""
	}
	return a.rtt.Round(time.Microsecond).String()
}

// standbyStatus is the answer of a replica that does not lead: it knows nothing it could
// vouch for, since only the leader allocates and probes.
type standbyStatus struct {
	Leader  bool   `json:"leader"`
	Replica string `json:"replica"`
	Message string `json:"message"`
}

// errStandby is Status's error on a replica that does not lead.
var errStandby = errors.New("standby: not the leader")

// hostname names this replica on the page.
var hostname = sync.OnceValue(func() string {
	name, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return name
})

// Status returns a snapshot of the leader's state. On a replica that does not lead it
// returns errStandby.
func (p *Page) Status() (*Status, error) {
	src := p.sources.Load()
	if src == nil {
		return nil, errStandby
	}
	cfg := src.Allocator.Config()
	snap := src.Announcer.Snapshot()
	st := &Status{Leader: true, Replica: hostname(), Time: time.Now(), Pools: poolStatus(src.Allocator.Pools()), RecentChanges: snap.Changes}

	services, err := src.Services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing Services from the cache: %w", err)
	}
	holding := false
	st.Services = []ServiceStatus{}
	for _, svc := range services {
		r, _ := annotation.Parse(svc)
		// What the allocator restores: until it has, its used counts are too low.
		holding = holding || (r.Ownership != annotation.OtherClass && len(r.Ingress) > 0)
		if r.Announced() {
			st.Services = append(st.Services, serviceStatus(cfg, r, snap.Decisions))
		}
	}
	slices.SortFunc(st.Services, func(x, y ServiceStatus) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})

	nodes, err := src.Nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	probed := src.Agents.Agents()
	st.Agents = make([]AgentStatus, 0, len(nodes))
	for _, n := range nodes {
		ag := AgentStatus{Node: n.Name, State: src.Agents.Health(n.Name).String(), Services: snap.Announces[n.Name]}
		if pr, ok := probed[n.Name]; ok {
			ag.Address = pr.Address.String()
			ag.rtt, ag.LastRTTSeconds, ag.LastAnswer = pr.LastRTT, pr.LastRTT.Seconds(), pr.LastAnswer
			ag.Covers = pr.Covers
			ag.ConfirmedOnly = pr.ConfirmedOnly
			for _, u := range pr.Unable {
				ag.Unable = append(ag.Unable, u.Explain(ag.Node))
			}
		}
		st.Agents = append(st.Agents, ag)
	}
	slices.SortFunc(st.Agents, func(x, y AgentStatus) int { return strings.Compare(x.Node, y.Node) })
	if iso, ok := src.Agents.(IsolationSource); ok {
		if v := iso.Isolation(); v.Isolated {
			st.Isolation = &IsolationStatus{Since: v.Since, Lost: len(v.Lost), Probed: v.Probed}
		}
	}

	st.Synced = src.Announcer.HasSynced() && (src.Allocator.Restored() || !holding)
	return st, nil
}

func poolStatus(stats []ipam.Stats) []PoolStatus {
	var out []PoolStatus
	for _, s := range stats {
		if len(out) == 0 || out[len(out)-1].Name != s.Pool {
			out = append(out, PoolStatus{Name: s.Pool})
		}
		p := &out[len(out)-1]
		p.Families = append(p.Families, PoolFamilyStatus{
			Family: s.Family.String(), Size: json.Number(s.Size.String()), Used: s.Used, Free: json.Number(s.Free.String()), size: s.Size,
		})
	}
	return out
}

func serviceStatus(cfg *config.Config, r *annotation.Request, decisions map[string]announcer.Decision) ServiceStatus {
	s := ServiceStatus{
		Namespace: r.Namespace, Name: strings.TrimPrefix(r.Service, r.Namespace+"/"),
		SharingKey: r.SharingKey, Announcer: r.Announcer,
	}
	for _, a := range r.Ingress {
		s.Addresses = append(s.Addresses, a.String())
	}
	if p := cfg.PoolFor(r.Ingress[0]); p != nil {
		s.Pool = p.Name
	}
	if d, ok := decisions[r.Service]; ok {
		s.Reason, s.Why, s.Since = d.Reason, d.Why, d.Since
		if d.Node != s.Announcer {
			s.Decided = &d.Node
		}
	}
	return s
}
