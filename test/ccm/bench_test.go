package ccm

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// benchServices is how many Services BenchmarkConverge creates.
const benchServices = 5000

// BenchmarkConverge creates 5,000 LoadBalancer Services at once and reports the time until
// every one has its address, and the ccm's peak resident memory. Run it with -benchtime=1x:
// one iteration is one whole run.
func BenchmarkConverge(b *testing.B) {
	e := setup(b)
	for b.Loop() {
		b.StopTimer()
		ns := e.namespace(b)
		ccm := e.startCCM(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		w, err := e.admin.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		errs := make(chan error, 1)
		go func() {
			for i := range benchServices {
				svc := lbService(fmt.Sprintf("svc-%04d", i), withAnnotation(annotation.Pool, "bench"))
				if _, err := e.admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		assigned := map[string]bool{}
		for len(assigned) < benchServices {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("watch ended with %d of %d Services assigned", len(assigned), benchServices)
				}
				if svc, isSvc := ev.Object.(*corev1.Service); isSvc && ev.Type != watch.Deleted && len(svc.Status.LoadBalancer.Ingress) > 0 {
					assigned[svc.Name] = true
				}
			case err := <-errs:
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		w.Stop()
		cancel()
		rss, err := peakRSS(ccm.Pid())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(elapsed.Seconds(), "s/5000-services")
		b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
		b.StartTimer()
	}
}

// peakRSS returns the peak resident set size of a process, in bytes (VmHWM).
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
