package ccm

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// apiWrites reads the API server's own apiserver_request_total and returns the write
// requests (anything but get, list and watch) it has served, per resource.
func (e *env) apiWrites(b testing.TB) map[string]float64 {
	body, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for labels, v := range samples(string(body), "apiserver_request_total") {
		switch label(labels, "verb") {
		case "GET", "LIST", "WATCH", "CONNECT":
			continue
		}
		resource := label(labels, "resource")
		if sub := label(labels, "subresource"); sub != "" {
			resource += "/" + sub
		}
		out[resource] += v
	}
	return out
}

// samples yields the labels (as written, inside the braces) and the value of every
// sample of the metric called name in a Prometheus text exposition.
func samples(text, name string) iter.Seq2[string, float64] {
	return func(yield func(string, float64) bool) {
		for line := range strings.Lines(text) {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+"{")
			if !ok {
				continue
			}
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64)
			if err == nil && !yield(rest[:i], v) {
				return
			}
		}
	}
}

// label returns the value of one label from labels as samples yields them.
func label(labels, name string) string {
	// Anchored at a comma, so that "resource" does not match "subresource".
	_, rest, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// BenchmarkSteadyState holds 1,000 Services with announcers and nothing changing for a
// minute, and reports the write requests the API server served meanwhile (Lease renewals
// apart: leader election and the API server's own identity Lease). Then it moves the
// endpoints of 100 Services to another node and reports the writes per announcer change.
// Run it with -benchtime=1x.
func BenchmarkSteadyState(b *testing.B) {
	const services, moved = 1000, 100
	e := setup(b)
	for b.Loop() {
		b.StopTimer()
		ns := e.namespace(b)
		// Upstream's leader-election timings, so the Lease figure is what a cluster sees.
		e.startCCM(b, append(benchFlags, "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s")...)
		for i := range services {
			e.create(b, ns, lbService(fmt.Sprintf("svc-%04d", i), withAnnotation(annotation.Pool, "bench")))
		}
		for i := range moved {
			e.setEndpoints(b, ns, fmt.Sprintf("svc-%04d", i), "node-a")
		}
		poll.Until(b, 3*time.Minute, func(ctx context.Context) (bool, string) {
			list, err := e.admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for i, svc := range list.Items {
				want := ""
				if i < moved {
					want = "node-a"
				}
				if a := svc.Annotations[annotation.Announcer]; a != "" && (want == "" || a == want) {
					n++
				}
			}
			return n == services, fmt.Sprintf("%d of %d Services announced", n, services)
		})
		// Let the creation settle: the event recorders drain their queues at their
		// clients' QPS. Settled is five quiet seconds.
		before := e.apiWrites(b)
		poll.Until(b, 3*time.Minute, func(ctx context.Context) (bool, string) {
			time.Sleep(5 * time.Second)
			now := e.apiWrites(b)
			busy := diff(now, before)
			delete(busy, "leases")
			before = now
			return len(busy) == 0, fmt.Sprintf("still writing: %v", busy)
		})
		b.StartTimer()
		time.Sleep(time.Minute)
		b.StopTimer()
		steady := diff(e.apiWrites(b), before)
		leases := steady["leases"]
		delete(steady, "leases")
		total := 0.0
		for _, v := range steady {
			total += v
		}
		if total > 0 {
			b.Logf("writes in steady state: %v", steady)
		}
		b.ReportMetric(total, "writes/min")
		b.ReportMetric(leases, "lease-writes/min")

		// Move 100 Services' endpoints: each announcer changes once.
		before = e.apiWrites(b)
		for i := range moved {
			e.setEndpoints(b, ns, fmt.Sprintf("svc-%04d", i), "node-b")
		}
		for i := range moved {
			e.waitAnnouncer(b, ns, fmt.Sprintf("svc-%04d", i), "node-b")
		}
		time.Sleep(5 * time.Second)
		change := diff(e.apiWrites(b), before)
		b.Logf("writes for %d announcer changes: %v", moved, change)
		b.ReportMetric(change["services"]/moved, "service-writes/change")
		b.ReportMetric(change["events"]/moved, "event-writes/change")
		b.StartTimer()
	}
}

func TestSamples(t *testing.T) {
	text := `# HELP apiserver_request_total Counter
apiserver_request_total{code="201",resource="services",subresource="",verb="POST"} 7
apiserver_request_total{code="200",resource="services",subresource="status",verb="PATCH"} 2
apiserver_request_total{code="200",resource="services",subresource="",verb="LIST"} 40
apiserver_request_total_other{verb="POST"} 9
`
	got := map[string]float64{}
	for labels, v := range samples(text, "apiserver_request_total") {
		if label(labels, "verb") != "LIST" {
			got[label(labels, "resource")+"/"+label(labels, "subresource")] += v
		}
	}
	if len(got) != 2 || got["services/"] != 7 || got["services/status"] != 2 {
		t.Errorf("samples = %v, want map[services/:7 services/status:2]", got)
	}
}
