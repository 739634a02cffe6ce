package provider

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
)

// Status is what the status page shows: the leader's pools, the Services it gave addresses
// to with the node announcing them and why, the node agents it probes, and its last
// announcer changes. It is read from memory and the informer caches: building it costs no
// API request.
type Status struct {
	// Leader is true: a standby answers with a standbyStatus instead.
	Leader bool `json:"leader"`
	// Replica is the host name of the process: in a cluster, the ccm pod's name.
	Replica string    `json:"replica"`
	Time    time.Time `json:"time"`
	// Synced is false while this leader is still filling its caches, probing the agents
	// for the first time or restoring the addresses recorded in the Services' status: until
	// then Services, agents and used addresses may be missing.
	Synced        bool              `json:"synced"`
	Pools         []PoolStatus      `json:"pools"`
	Services      []ServiceStatus   `json:"services"`
	Agents        []AgentStatus     `json:"agents"`
	RecentChanges []AnnouncerChange `json:"recentChanges"`
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
	// State is up, down, draining or unknown, as in the baremetal_ccm_agents gauge.
	State string `json:"state"`
	// Address is where the agent is probed; empty when it is not, for a node without an
	// InternalIP.
	Address string `json:"address,omitempty"`
	// LastRTTSeconds is the round trip of the last answered probe, at LastAnswer.
	LastRTTSeconds float64   `json:"lastRTTSeconds,omitzero"`
	LastAnswer     time.Time `json:"lastAnswer,omitzero"`
	// Services counts the Services whose addresses the node announces.
	Services int `json:"services"`

	rtt time.Duration
}

// RTT is LastRTTSeconds for people, "" before any answer.
func (a AgentStatus) RTT() string {
	if a.rtt == 0 {
		return ""
	}
	return a.rtt.Round(time.Microsecond).String()
}

// AnnouncerChange is a change of a Service's announcer, or a NoAnnouncer warning, as the
// event on the Service said.
type AnnouncerChange struct {
	Time    time.Time `json:"time"`
	Service string    `json:"service"` // namespace/name
	// Event is the event's reason: AnnouncerChanged, or NoAnnouncer when no node may
	// announce.
	Event  string `json:"event"`
	From   string `json:"from"` // "" for none
	To     string `json:"to"`   // "" for none
	Reason string `json:"reason"`
	Why    string `json:"why"`
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

// Status returns a snapshot of the leader's state. On a replica that does not lead (the
// provider is not initialized) it returns errStandby.
func (c *Cloud) Status() (*Status, error) {
	a := c.announcer.Load()
	if a == nil {
		return nil, errStandby
	}
	st := &Status{Leader: true, Replica: hostname(), Time: time.Now(), Pools: poolStatus(c.lb.alloc.Stats())}

	// Copies, so that the lock that every announcer decision takes is held for a moment.
	a.mu.Lock()
	decisions := make(map[string]decision, len(a.lastWhy))
	for k, d := range a.lastWhy {
		decisions[k] = d
	}
	announces := map[string]int{}
	for _, o := range a.owned {
		if o.node != "" {
			announces[o.node] += o.services
		}
	}
	st.RecentChanges = a.changes.newestFirst()
	a.mu.Unlock()

	services, err := a.services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing Services from the cache: %w", err)
	}
	holding := false
	st.Services = []ServiceStatus{}
	for _, svc := range services {
		// What the allocator restores: until it has, its used counts are too low.
		holding = holding || (svc.Spec.LoadBalancerClass == nil && len(svc.Status.LoadBalancer.Ingress) > 0)
		if announced(svc) {
			st.Services = append(st.Services, serviceStatus(c, svc, decisions))
		}
	}
	slices.SortFunc(st.Services, func(x, y ServiceStatus) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})

	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	probed := a.prober.probedAgents()
	st.Agents = make([]AgentStatus, 0, len(nodes))
	for _, n := range nodes {
		ag := AgentStatus{Node: n.Name, State: a.health.Health(n.Name).String(), Services: announces[n.Name]}
		if p, ok := probed[n.Name]; ok {
			ag.Address = p.addr.String()
			ag.rtt, ag.LastRTTSeconds, ag.LastAnswer = p.lastRTT, p.lastRTT.Seconds(), p.lastAnswer
		}
		st.Agents = append(st.Agents, ag)
	}
	slices.SortFunc(st.Agents, func(x, y AgentStatus) int { return strings.Compare(x.Node, y.Node) })

	st.Synced = a.health.HasSynced() && (c.lb.isRestored() || !holding)
	for _, synced := range a.synced {
		st.Synced = st.Synced && synced()
	}
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

func serviceStatus(c *Cloud, svc *v1.Service, decisions map[string]decision) ServiceStatus {
	addrs := ingressAddresses(svc)
	s := ServiceStatus{
		Namespace: svc.Namespace, Name: svc.Name,
		SharingKey: sharingKey(svc), Announcer: svc.Annotations[annotation.Announcer],
	}
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, a.String())
	}
	if p := c.lb.cfg.PoolFor(addrs[0]); p != nil {
		s.Pool = p.Name
	}
	if d, ok := decisions[groupKey(svc)]; ok {
		s.Reason, s.Why, s.Since = string(d.reason), d.why, d.since
		if d.node != s.Announcer {
			s.Decided = &d.node
		}
	}
	return s
}

// isRestored reports whether the allocator holds the addresses of the Services' status.
func (lb *loadBalancer) isRestored() bool {
	lb.restoreMu.Lock()
	defer lb.restoreMu.Unlock()
	return lb.restored
}

//go:embed status.html
var statusHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000Z") },
	"ago":   ago,
}).Parse(statusHTML))

// ago says how long before now t was, to the precision that matters at that distance.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	return d.String() + " ago"
}

// StatusHandler serves the status page: "/" as HTML, "/status.json" as JSON, both read
// only. On a replica that does not lead both answer 503.
func (c *Cloud) StatusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.serveHTML)
	mux.HandleFunc("GET /status.json", c.serveJSON)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Always the state of now; and the page needs nothing but its own inline style,
		// so a browser is told to load and run nothing else.
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func (c *Cloud) serveHTML(w http.ResponseWriter, _ *http.Request) {
	st, err := c.Status()
	var page bytes.Buffer
	code := http.StatusOK
	switch {
	case errors.Is(err, errStandby):
		code = http.StatusServiceUnavailable
		err = statusPage.ExecuteTemplate(&page, "standby", standbyStatus{Replica: hostname(), Message: errStandby.Error()})
	case err == nil:
		err = statusPage.ExecuteTemplate(&page, "page", st)
	}
	if err != nil {
		klog.ErrorS(err, "Cannot render the status page")
		http.Error(w, "cannot render the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(page.Bytes())
}

func (c *Cloud) serveJSON(w http.ResponseWriter, _ *http.Request) {
	var body any
	code := http.StatusOK
	st, err := c.Status()
	switch {
	case errors.Is(err, errStandby):
		code, body = http.StatusServiceUnavailable, standbyStatus{Replica: hostname(), Message: errStandby.Error()}
	case err != nil:
		klog.ErrorS(err, "Cannot build the status")
		http.Error(w, "cannot build the status: "+err.Error(), http.StatusInternalServerError)
		return
	default:
		body = st
	}
	data, err := json.MarshalIndent(body, "", "  ")
	if err != nil {
		klog.ErrorS(err, "Cannot encode the status")
		http.Error(w, "cannot encode the status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

// ServeStatus serves StatusHandler on address (host:port) for as long as the process runs.
// It returns once it listens, so that an address that cannot be had stops the process at
// start rather than going unnoticed.
func (c *Cloud) ServeStatus(address string) error {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listen for the status page on %q: %w", address, err)
	}
	srv := &http.Server{
		Handler:           c.StatusHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          klog.NewStandardLogger("ERROR"),
	}
	at := l.Addr().(*net.TCPAddr)
	klog.InfoS("Serving the status page", "address", at.String())
	if !at.IP.IsLoopback() {
		// The page has no authentication: anyone who reaches the port reads every
		// Service's addresses and the node that announces them.
		klog.InfoS("The status page is reachable from outside this host, without authentication", "address", at.String())
	}
	go func() {
		err := srv.Serve(l)
		klog.ErrorS(err, "The status page stopped serving", "address", at.String())
	}()
	return nil
}
