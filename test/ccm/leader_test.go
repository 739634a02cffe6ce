package ccm

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// writeRequests sums a ccm's client-side requests that change something, from its
// rest_client_requests_total metric.
func writeRequests(metrics string) int {
	n := 0
	for labels, v := range samples(metrics, "rest_client_requests_total") {
		switch label(labels, "method") {
		case "POST", "PUT", "PATCH", "DELETE":
			n += int(v)
		}
	}
	return n
}

// TestStandbyTakesOver runs two ccm processes: only the leader writes, and when it is
// killed the standby takes over without moving any announcer whose inputs did not change.
func TestStandbyTakesOver(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	// The secure port's callers are authorized without asking the API server, so that
	// scraping the standby makes no request of its own.
	open := "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
	leader, _ := e.startServingCCM(t, open)
	e.create(t, ns, lbService("first"))
	e.waitIngress(t, ns, "first", 1) // only a leader assigns

	_, standbyAddr := e.startServingCCM(t, open)
	names := []string{"svc-0", "svc-1", "svc-2"}
	for i, name := range names {
		e.create(t, ns, lbService(name))
		e.waitIngress(t, ns, name, 1)
		e.setEndpoints(t, ns, name, []string{"node-a", "node-b"}[i%2])
	}
	before := map[string]string{}
	for i, name := range names {
		want := []string{"node-a", "node-b"}[i%2]
		e.waitAnnouncer(t, ns, name, want)
		before[name] = want
	}
	if w := writeRequests(e.scrape(t, standbyAddr)); w != 0 {
		t.Errorf("the standby made %d write requests while not leading", w)
	}
	// AnnouncerChanged events per Service.
	changes := func() map[string]int {
		list, err := e.admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=AnnouncerChanged"})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, ev := range list.Items {
			n[ev.InvolvedObject.Name] += int(ev.Count)
		}
		return n
	}
	for _, name := range names {
		e.waitEvent(t, ns, name, "AnnouncerChanged", "")
	}
	changesBefore := changes()

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// The standby leads once it assigns a new Service an address.
	e.create(t, ns, lbService("after-takeover"))
	e.waitIngress(t, ns, "after-takeover", 1)
	e.setEndpoints(t, ns, "after-takeover", "node-b")
	e.waitAnnouncer(t, ns, "after-takeover", "node-b")
	e.waitEvent(t, ns, "after-takeover", "AnnouncerChanged", "")

	for name, want := range before {
		svc, err := e.admin.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := svc.Annotations[annotation.Announcer]; got != want {
			t.Errorf("%s: announcer %q after the takeover, %q before", name, got, want)
		}
	}
	changesAfter := changes()
	for _, name := range names {
		if changesAfter[name] != changesBefore[name] {
			t.Errorf("%s: %d AnnouncerChanged events before the takeover, %d after", name, changesBefore[name], changesAfter[name])
		}
	}
}
