package app

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
)

// serveHTTP serves the metrics and the probes of the kubelet. /healthz reports everything
// that is dead; /livez, the liveness probe, only what a restart mends: an agent restarted
// while the API server is away could not fill its cache, and would announce nothing.
func serveHTTP(l net.Listener, watcher *servicewatch.Watcher, h *health) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	report := func(check func(time.Time) string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if problem := check(time.Now()); problem != "" {
				http.Error(w, problem, http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("/healthz", report(h.healthy))
	mux.HandleFunc("/livez", report(h.live))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !watcher.HasSynced() {
			http.Error(w, "Service cache not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Metrics server stopped")
	}
}

// peerNode keeps of another node only its name and addresses, which is all a check of
// peers needs, so that the cache of a large cluster's nodes stays small.
func peerNode(self string) cache.TransformFunc {
	return func(obj any) (any, error) {
		n, ok := obj.(*v1.Node)
		if !ok || n.Name == self {
			if ok {
				n.ManagedFields = nil
			}
			return obj, nil
		}
		return &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
			Status:     v1.NodeStatus{Addresses: n.Status.Addresses},
		}, nil
	}
}

// clientConfig returns the configuration of the API server's client: kubeconfig's, or
// the pod's in-cluster one when kubeconfig is empty.
func clientConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}
