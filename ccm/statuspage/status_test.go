package statuspage

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

// get serves one request with h and returns the status, the content type and the body.
func get(t *testing.T, h http.Handler, method, path string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, rec.Header().Get("Content-Type"), string(body)
}

// tableRow returns the first <tr> of page that contains every one of texts, or "".
func tableRow(page string, texts ...string) string {
	for _, m := range regexp.MustCompile(`(?s)<tr[ >].*?</tr>`).FindAllString(page, -1) {
		found := true
		for _, s := range texts {
			found = found && strings.Contains(m, s)
		}
		if found {
			return m
		}
	}
	return ""
}

// TestStatus builds the status of a leader that gave one Service an address and moved
// its announcer to the node with its endpoint, and serves it as JSON and HTML.
func TestStatus(t *testing.T) {
	svc := lbService("web", "198.51.100.1")
	svc.Annotations[annotation.Announcer] = "node-b"
	nodeA := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodeB := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	since := time.Now().Add(-time.Minute)
	change := announcer.Change{Time: since, Service: "ns/web", Event: announcer.ReasonAnnouncerChanged, To: "node-b", Reason: "ReadyEndpoints", Why: "node-b has ready endpoints"}
	src := sources(t, []*v1.Service{svc}, []*v1.Node{nodeA, nodeB})
	src.Announcer = fakeAnnouncer{synced: true, snap: announcer.Snapshot{
		Decisions: map[string]announcer.Decision{"ns/web": {Node: "node-b", Reason: "ReadyEndpoints", Why: "node-b has ready endpoints", Since: since}},
		Announces: map[string]int{"node-b": 1},
		Changes:   []announcer.Change{change},
	}}
	src.Agents = fakeAgents{
		states: map[string]liveness.State{"node-a": liveness.Up, "node-b": liveness.Up},
		agents: map[string]prober.Agent{"node-b": {Address: netip.MustParseAddrPort("192.0.2.11:7474"), LastRTT: 312 * time.Microsecond, LastAnswer: time.Now()}},
	}

	p := New()
	h := p.Handler()
	if code, _, body := get(t, h, "GET", "/status.json"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"message": "standby: not the leader"`) {
		t.Errorf("/status.json of a standby: %d %s", code, body)
	}
	if code, _, body := get(t, h, "GET", "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "standby: not the leader") {
		t.Errorf("/ of a standby: %d %s", code, body)
	}
	p.Lead(src)

	// While the annotation does not say what the announcer decided, the page says what
	// is being written.
	pending := lbService("web", "198.51.100.1")
	srcPending := *src
	srcPending.Services = lister(t, pending)
	p.Lead(&srcPending)
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Services[0]; s.Announcer != "" || !s.Pending() || s.DecidedNode() != "node-b" {
		t.Errorf("before the annotation is written: announcer %q, decided %q; want \"\" and node-b", s.Announcer, s.DecidedNode())
	}
	p.Lead(src)

	code, ctype, body := get(t, h, "GET", "/status.json")
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("/status.json: %d %s\n%s", code, ctype, body)
	}
	// The JSON field names are an interface: decode them as any client would.
	var got struct {
		Leader bool `json:"leader"`
		Pools  []struct {
			Name     string `json:"name"`
			Families []struct {
				Family string      `json:"family"`
				Size   json.Number `json:"size"`
				Used   int         `json:"used"`
				Free   json.Number `json:"free"`
			} `json:"families"`
		} `json:"pools"`
		Services []struct {
			Namespace, Name, Pool, Announcer, Reason, Why string
			Addresses                                     []string
			Decided                                       *string
			Since                                         time.Time
		} `json:"services"`
		Agents []struct {
			Node, State, Address string
			LastRTTSeconds       float64 `json:"lastRTTSeconds"`
			Services             int
		} `json:"agents"`
		RecentChanges []struct {
			Service, Event, From, To, Reason, Why string
			Time                                  time.Time
		} `json:"recentChanges"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode /status.json: %v\n%s", err, body)
	}
	if !got.Leader {
		t.Error("leader is false")
	}
	if p := fmt.Sprint(got.Pools); p != "[{default [{IPv4 4 1 3} {IPv6 4 0 4}]}]" {
		t.Errorf("pools %s", p)
	}
	if len(got.Services) != 1 {
		t.Fatalf("services %+v, want ns/web alone", got.Services)
	}
	s := got.Services[0]
	if s.Namespace != "ns" || s.Name != "web" || fmt.Sprint(s.Addresses) != "[198.51.100.1]" || s.Pool != "default" ||
		s.Announcer != "node-b" || s.Decided != nil || s.Reason != "ReadyEndpoints" || s.Why != "node-b has ready endpoints" || s.Since.IsZero() {
		t.Errorf("service %+v", s)
	}
	if a := fmt.Sprintf("%+v", got.Agents); a != "[{Node:node-a State:up Address: LastRTTSeconds:0 Services:0} {Node:node-b State:up Address:192.0.2.11:7474 LastRTTSeconds:0.000312 Services:1}]" {
		t.Errorf("agents %s", a)
	}
	if len(got.RecentChanges) != 1 {
		t.Fatalf("recent changes %+v, want one", got.RecentChanges)
	}
	if c := got.RecentChanges[0]; c.Service != "ns/web" || c.Event != announcer.ReasonAnnouncerChanged || c.From != "" || c.To != "node-b" || c.Why != "node-b has ready endpoints" || c.Time.IsZero() {
		t.Errorf("recent change %+v", c)
	}

	code, ctype, page := get(t, h, "GET", "/")
	if code != http.StatusOK || ctype != "text/html; charset=utf-8" {
		t.Fatalf("/: %d %s\n%s", code, ctype, page)
	}
	if row := tableRow(page, "ns/web", "198.51.100.1"); !strings.Contains(row, "<b>node-b</b>") || !strings.Contains(row, "node-b has ready endpoints") {
		t.Errorf("the Service's row does not name its announcer and why: %q\n%s", row, page)
	}
	if row := tableRow(page, "node-b", "192.0.2.11:7474"); !strings.Contains(row, "312µs") || !strings.Contains(row, `class="state up"`) {
		t.Errorf("node-b's row lacks its state or RTT: %q", row)
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "src=") {
		t.Error("the page loads something: it must be self-contained")
	}

	if code, _, _ := get(t, h, "POST", "/"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", code)
	}
	if code, _, _ := get(t, h, "GET", "/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics: %d, want 404", code)
	}
}

// TestStatusEscapes checks that names from the cluster are text on the page, never markup.
func TestStatusEscapes(t *testing.T) {
	svc := lbService("web", "198.51.100.1")
	svc.Annotations[annotation.AllowSharedIP] = `<img src=x onerror=alert(1)>`
	p := New()
	p.Lead(sources(t, []*v1.Service{svc}, nil))
	_, _, page := get(t, p.Handler(), "GET", "/")
	if strings.Contains(page, "<img") || !strings.Contains(page, "&lt;img src=x") {
		t.Errorf("the sharing key is not escaped:\n%s", page)
	}
}

// TestStatusSynced checks that the page says it is not synced until the announcer decides
// on a full view and the allocator restored what the Services hold.
func TestStatusSynced(t *testing.T) {
	src := sources(t, []*v1.Service{lbService("web", "198.51.100.1")}, nil)
	p := New()
	p.Lead(src)
	for _, tc := range []struct {
		announcerSynced, restored, want bool
	}{{false, true, false}, {true, false, false}, {true, true, true}} {
		src.Announcer = fakeAnnouncer{synced: tc.announcerSynced}
		src.Allocator = fakeAllocator{cfg: src.Allocator.Config(), restored: tc.restored}
		st, err := p.Status()
		if err != nil || st.Synced != tc.want {
			t.Errorf("announcer synced %v, restored %v: synced %v, %v; want %v", tc.announcerSynced, tc.restored, st.Synced, err, tc.want)
		}
	}
}

const testConfig = `
pools:
- name: default
  addresses: [198.51.100.0/30, 2001:db8::/126]
`

func lbService(name string, ips ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{}},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func lister(t *testing.T, services ...*v1.Service) corelisters.ServiceLister {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range services {
		if err := indexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewServiceLister(indexer)
}

// sources returns the views of a leader whose allocator gave each Service its status
// addresses, whose announcer has synced but decided nothing, and whose prober knows
// nothing.
func sources(t *testing.T, services []*v1.Service, nodes []*v1.Node) *Sources {
	t.Helper()
	cfg, err := config.Parse("test", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	alloc := ipam.New(cfg.Pools)
	var assignments []ipam.Assignment
	for _, svc := range services {
		r, _ := annotation.Parse(svc)
		assignments = append(assignments, ipam.Assignment{Service: r.Service, Addresses: r.Ingress})
	}
	if err := alloc.Restore(assignments); err != nil {
		t.Fatal(err)
	}
	nodeIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := nodeIndexer.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return &Sources{
		Allocator: fakeAllocator{cfg: cfg, stats: alloc.Stats(), restored: true},
		Announcer: fakeAnnouncer{synced: true},
		Agents:    fakeAgents{},
		Services:  lister(t, services...),
		Nodes:     corelisters.NewNodeLister(nodeIndexer),
	}
}

type fakeAllocator struct {
	cfg      *config.Config
	stats    []ipam.Stats
	restored bool
}

func (f fakeAllocator) Pools() []ipam.Stats    { return f.stats }
func (f fakeAllocator) Restored() bool         { return f.restored }
func (f fakeAllocator) Config() *config.Config { return f.cfg }

type fakeAnnouncer struct {
	snap   announcer.Snapshot
	synced bool
}

func (f fakeAnnouncer) Snapshot() announcer.Snapshot { return f.snap }
func (f fakeAnnouncer) HasSynced() bool              { return f.synced }

type fakeAgents struct {
	states map[string]liveness.State
	agents map[string]prober.Agent
}

func (f fakeAgents) Health(node string) liveness.State {
	if s, ok := f.states[node]; ok {
		return s
	}
	return liveness.Down
}
func (f fakeAgents) Agents() map[string]prober.Agent { return f.agents }

// isolatedAgents is a prober that takes itself for cut off from the agents.
type isolatedAgents struct {
	fakeAgents
	iso prober.Isolation
}

func (f isolatedAgents) Isolation() prober.Isolation { return f.iso }

// TestStatusIsolation checks that the page says when the prober takes itself for cut off.
func TestStatusIsolation(t *testing.T) {
	src := sources(t, nil, nil)
	p := New()
	p.Lead(src)
	if _, _, page := get(t, p.Handler(), "GET", "/"); strings.Contains(page, "own isolation") {
		t.Error("the page tells of an isolation with none")
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src.Agents = isolatedAgents{iso: prober.Isolation{Isolated: true, Lost: []string{"a", "b", "c"}, Probed: 4, Since: since}}
	_, _, page := get(t, p.Handler(), "GET", "/")
	if !strings.Contains(page, "Since 03:04:05.000Z, 3 of 4 agents do not answer: this leader takes it for its own isolation") {
		t.Errorf("the page does not tell of the isolation:\n%s", page)
	}
	_, _, js := get(t, p.Handler(), "GET", "/status.json")
	var st Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	if want := (IsolationStatus{Since: since, Lost: 3, Probed: 4}); st.Isolation == nil || *st.Isolation != want {
		t.Errorf("status.json isolation %+v, want %+v", st.Isolation, want)
	}
}
