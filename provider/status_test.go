package provider

import (
	"context"
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
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
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
	svc := withStatus(service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), metav1.Now().Time, "198.51.100.1")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint(ptr.To("node-b"), ptr.To(true), nil)},
	}
	nodeA := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodeB := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	a, client := newTestAnnouncer(t, svc, slice, nodeA, nodeB)
	cloud := New(a.cfg)
	cloud.lb.services, cloud.lb.servicesSynced = a.services, func() bool { return true }
	if err := cloud.lb.ready(); err != nil {
		t.Fatal(err)
	}
	// The prober has probed node-b once; node-a not yet.
	probedB := &agentProbe{addr: netip.MustParseAddrPort("192.0.2.11:7474"), cancel: func() {}}
	probedB.lastRTT.Store(int64(312 * time.Microsecond))
	probedB.lastAnswer.Store(time.Now().UnixNano())
	a.prober.agents["node-b"] = probedB

	h := cloud.StatusHandler()
	if code, _, body := get(t, h, "GET", "/status.json"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"message": "standby: not the leader"`) {
		t.Errorf("/status.json of a standby: %d %s", code, body)
	}
	if code, _, body := get(t, h, "GET", "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "standby: not the leader") {
		t.Errorf("/ of a standby: %d %s", code, body)
	}

	cloud.announcer.Store(a) // leading
	if err := a.sync(context.Background(), groupKey(svc)); err != nil {
		t.Fatal(err)
	}
	patched, err := client.CoreV1().Services("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Until the cache sees the patch, the page says what is being written.
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, err := a.services.Services("ns").Get("web")
		return err == nil && cached.Annotations[annotation.Announcer] == "node-b", nil
	}); err != nil {
		t.Fatal("the cache never saw the announcer patch")
	}
	if err := a.serviceIndexer.Update(svc); err != nil {
		t.Fatal(err)
	}
	st, err := cloud.Status()
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Services[0]; s.Announcer != "" || !s.Pending() || s.DecidedNode() != "node-b" {
		t.Errorf("before the cache sees the patch: announcer %q, decided %q; want \"\" and node-b", s.Announcer, s.DecidedNode())
	}
	if err := a.serviceIndexer.Update(patched); err != nil {
		t.Fatal(err)
	}

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
	if p := fmt.Sprint(got.Pools); p != "[{default [{IPv4 4 1 3} {IPv6 4 0 4}]} {v4only [{IPv4 4 0 4}]}]" {
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
	if c := got.RecentChanges[0]; c.Service != "ns/web" || c.Event != ReasonAnnouncerChanged || c.From != "" || c.To != "node-b" || c.Why != "node-b has ready endpoints" || c.Time.IsZero() {
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
	svc := withStatus(service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), metav1.Now().Time, "198.51.100.1")
	svc.Annotations[annotation.AllowSharedIP] = `<img src=x onerror=alert(1)>`
	a, _ := newTestAnnouncer(t, svc)
	cloud := New(a.cfg)
	cloud.announcer.Store(a)
	_, _, page := get(t, cloud.StatusHandler(), "GET", "/")
	if strings.Contains(page, "<img") || !strings.Contains(page, "&lt;img src=x") {
		t.Errorf("the sharing key is not escaped:\n%s", page)
	}
}

func TestChangeLogKeepsTheNewest(t *testing.T) {
	var l changeLog
	if got := l.newestFirst(); len(got) != 0 {
		t.Errorf("empty log: %v", got)
	}
	for i := range maxChanges + 7 {
		l.add(AnnouncerChange{Service: fmt.Sprint(i)})
	}
	got := l.newestFirst()
	if len(got) != maxChanges || got[0].Service != fmt.Sprint(maxChanges+6) || got[maxChanges-1].Service != "7" {
		t.Errorf("kept %d changes, newest %s, oldest %s; want %d from %d to 7", len(got), got[0].Service, got[len(got)-1].Service, maxChanges, maxChanges+6)
	}
}

// TestStatusSentenceFollowsTheChange checks that a group a new leader moves is explained
// as the event explains it, and keeps that sentence while nothing changes.
func TestStatusSentenceFollowsTheChange(t *testing.T) {
	svc := withStatus(service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), metav1.Now().Time, "198.51.100.1")
	svc.Annotations[annotation.Announcer] = "node-a" // as a previous leader left it
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint(ptr.To("node-b"), ptr.To(true), nil)},
	}
	a, _ := newTestAnnouncer(t, svc, slice, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}})
	key := groupKey(svc)
	if err := a.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	first := a.lastWhy[key]
	if first.node != "node-b" || first.why != "node-a has no ready endpoint" {
		t.Errorf("after the move: %+v, want node-b because node-a has no ready endpoint", first)
	}
	// Nothing changed: the sentence and its time stay.
	if err := a.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if again := a.lastWhy[key]; again != first {
		t.Errorf("a sync with nothing changed rewrote the decision: %+v, was %+v", again, first)
	}
}
