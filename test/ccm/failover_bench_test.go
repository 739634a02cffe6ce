package ccm

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// BenchmarkNodeFailover gives 1,000 Services announcers over the two nodes, stops the
// agent of the busier one, and reports how long until none of its Services names it: the
// failover time of the last Service when a node that announces hundreds dies. The ccm
// runs with its default flags. Run it with -benchtime=1x.
func BenchmarkNodeFailover(b *testing.B) {
	const services = 1000
	e := setup(b)
	for b.Loop() {
		b.StopTimer()
		ns := e.namespace(b)
		e.startCCM(b)
		for i := range services {
			e.create(b, ns, lbService(fmt.Sprintf("svc-%04d", i), withAnnotation(annotation.Pool, "bench")))
		}
		count := func(ctx context.Context) (map[string]int, error) {
			list, err := e.admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			out := map[string]int{}
			for _, svc := range list.Items {
				out[svc.Annotations[annotation.Announcer]]++
			}
			return out, nil
		}
		var before map[string]int
		poll.Until(b, 5*time.Minute, func(ctx context.Context) (bool, string) {
			var err error
			if before, err = count(ctx); err != nil {
				return false, err.Error()
			}
			return before[""] == 0, fmt.Sprintf("announcers: %v", before)
		})
		victim := "node-a"
		if before["node-b"] > before["node-a"] {
			victim = "node-b"
		}
		b.StartTimer()
		start := time.Now()
		e.agents[victim].stop()
		var last time.Duration
		for {
			now, err := count(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if now[victim] == 0 {
				last = time.Since(start)
				break
			}
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("after 2 min %d Services still name %s", now[victim], victim)
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.StopTimer()
		if err := e.agents[victim].start(); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d of %d Services announced by %s moved in %v", before[victim], services, victim, last)
		b.ReportMetric(float64(before[victim]), "services-moved")
		b.ReportMetric(last.Seconds(), "s-to-move-all")
		b.StartTimer()
	}
}
