package ccm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// benchServices is how many Services BenchmarkConverge creates.
const benchServices = 5000

// benchWriters is how many clients create the Services.
const benchWriters = 16

// benchFlags are the ccm flags BenchmarkConverge runs with, as docs/configuration.md recommends for
// clusters with thousands of Services: each new Service costs the service controller two
// writes, so its client's QPS sets the pace.
var benchFlags = []string{"--kube-api-qps=300", "--kube-api-burst=600", "--concurrent-service-syncs=20"}

// BenchmarkConverge reports how long 5,000 new LoadBalancer Services take to all have
// addresses, and the ccm's peak resident memory. Run it with -benchtime=1x: one iteration
// is one whole run.
//
//   - live: the ccm runs while 16 clients create the Services; s-to-create is how long the
//     creates alone took, so s-to-assign-all minus s-to-create is the ccm's lag.
//   - backlog: the Services exist before the ccm starts (a fresh install, or a long
//     outage), so the time is the ccm's alone.
func BenchmarkConverge(b *testing.B) {
	e := setup(b)
	b.Run("live", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ns := e.namespace(b)
			ccm := e.startCCM(b, benchFlags...)
			done := e.countAssigned(b, ns)
			b.StartTimer()
			start := time.Now()
			e.createBench(b, ns)
			created := time.Since(start)
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(created.Seconds(), "s-to-create")
			b.ReportMetric(elapsed.Seconds(), "s-to-assign-all")
			b.ReportMetric(peakRSSMiB(b, ccm), "ccm-peak-RSS-MiB")
			b.StartTimer()
		}
	})
	b.Run("backlog", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			ns := e.namespace(b)
			e.createBench(b, ns)
			done := e.countAssigned(b, ns)
			b.StartTimer()
			start := time.Now()
			// Without leader election: the previous run's lease would otherwise hold this
			// ccm back for its duration.
			ccm := e.startCCM(b, append(benchFlags, "--leader-elect=false")...)
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(elapsed.Seconds(), "s-to-assign-all")
			b.ReportMetric(peakRSSMiB(b, ccm), "ccm-peak-RSS-MiB")
			b.StartTimer()
		}
	})
}

// createBench creates the benchmark's Services in ns with several writers, as many users
// and controllers would: one alone would measure the latency of a create, not throughput.
func (e *env) createBench(b *testing.B, ns string) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range benchWriters {
		wg.Go(func() {
			for i := range next {
				svc := lbService(fmt.Sprintf("svc-%04d", i), withAnnotation(annotation.Pool, "bench"))
				if _, err := e.admin.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range benchServices {
		next <- i
	}
	close(next)
	wg.Wait()
}

// countAssigned returns a channel closed once every benchmark Service in ns has an
// address. It watches through an informer, which resumes a watch the API server closes
// for falling behind.
func (e *env) countAssigned(b *testing.B, ns string) <-chan struct{} {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	var mu sync.Mutex
	assigned := map[string]bool{}
	done := make(chan struct{})
	count := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !assigned[svc.Name] {
			assigned[svc.Name] = true
			if len(assigned) == benchServices {
				close(done)
			}
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.admin, 0, informers.WithNamespace(ns))
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    count,
		UpdateFunc: func(_, obj any) { count(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	b.Cleanup(factory.Shutdown)
	go func() {
		<-ctx.Done()
		mu.Lock()
		defer mu.Unlock()
		if len(assigned) < benchServices {
			b.Errorf("%d of %d Services assigned when the benchmark gave up", len(assigned), benchServices)
			close(done)
		}
	}()
	return done
}

func peakRSSMiB(b *testing.B, p *process.Process) float64 {
	rss, err := p.PeakRSS()
	if err != nil {
		b.Fatal(err)
	}
	return float64(rss) / (1 << 20)
}
