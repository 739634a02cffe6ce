package ccm

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// assignTimeout bounds how long a Service may wait for its addresses.
const assignTimeout = 30 * time.Second

type svcOption func(*corev1.Service)

func lbService(name string, opts ...svcOption) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			// Traffic reaches the announcing node on the Service address itself; node
			// ports are not needed, and there are only 2,768 of them.
			AllocateLoadBalancerNodePorts: ptr.To(false),
		},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func withAnnotation(key, value string) svcOption {
	return func(s *corev1.Service) { s.Annotations[key] = value }
}

func withFamilies(policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) svcOption {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &policy
		s.Spec.IPFamilies = families
	}
}

func withPort(protocol corev1.Protocol, port int32) svcOption {
	return func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "p", Protocol: protocol, Port: port}}
	}
}

func (e *env) create(t testing.TB, ns string, svc *corev1.Service) {
	t.Helper()
	if _, err := e.admin.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Service %s/%s: %v", ns, svc.Name, err)
	}
}

// ingress returns the addresses in a Service's status, and fails the test if an entry
// lacks ipMode VIP.
func ingress(t testing.TB, svc *corev1.Service) []string {
	t.Helper()
	var out []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			t.Errorf("%s/%s: ingress %s has ipMode %v, want VIP", svc.Namespace, svc.Name, ing.IP, ing.IPMode)
		}
		out = append(out, ing.IP)
	}
	return out
}

// waitIngress waits until the Service's status holds n addresses, and returns them.
func (e *env) waitIngress(t testing.TB, ns, name string, n int) []string {
	t.Helper()
	var got []string
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		svc, err := e.admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = ingress(t, svc)
		return len(got) == n, fmt.Sprintf("%s/%s has ingress %v, want %d addresses", ns, name, got, n)
	})
	return got
}

// waitEvent waits for an event with reason on the Service whose message contains text.
func (e *env) waitEvent(t testing.TB, ns, name, reason, text string) {
	t.Helper()
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		return e.findEvent(ctx, ns, name, reason, text) != "", fmt.Sprintf("no %s event on %s/%s saying %q", reason, ns, name, text)
	})
}

func inPrefix(t testing.TB, addr, prefix string) {
	t.Helper()
	if !netip.MustParsePrefix(prefix).Contains(netip.MustParseAddr(addr)) {
		t.Errorf("address %s is not in %s", addr, prefix)
	}
}

// TestCCM runs the scenarios that share one ccm process. They are subtests of one test so
// that the ccm's log is printed once, at the end, if any of them fails.
func TestCCM(t *testing.T) {
	e := setup(t)
	_, serving := e.startServingCCM(t)

	t.Run("families", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("v4", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv4Protocol)))
		e.create(t, ns, lbService("v6", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)))
		e.create(t, ns, lbService("dual", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)))
		inPrefix(t, e.waitIngress(t, ns, "v4", 1)[0], "198.18.0.0/20")
		inPrefix(t, e.waitIngress(t, ns, "v6", 1)[0], "fd00:ba5e::/64")
		dual := e.waitIngress(t, ns, "dual", 2)
		inPrefix(t, dual[0], "fd00:ba5e::/64") // in the order of spec.ipFamilies
		inPrefix(t, dual[1], "198.18.0.0/20")
	})

	t.Run("requested addresses", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("by-annotation", withAnnotation(annotation.IPs, "192.0.2.10")))
		byField := lbService("by-field")
		byField.Spec.LoadBalancerIP = "192.0.2.11"
		e.create(t, ns, byField)
		if got := e.waitIngress(t, ns, "by-annotation", 1); got[0] != "192.0.2.10" {
			t.Errorf("by-annotation got %v, want 192.0.2.10", got)
		}
		if got := e.waitIngress(t, ns, "by-field", 1); got[0] != "192.0.2.11" {
			t.Errorf("by-field got %v, want 192.0.2.11", got)
		}

		e.create(t, ns, lbService("taken", withAnnotation(annotation.IPs, "192.0.2.10")))
		e.waitEvent(t, ns, "taken", "AddressInUse", "address 192.0.2.10 is already assigned to "+ns+"/by-annotation")
		e.create(t, ns, lbService("outside", withAnnotation(annotation.IPs, "10.99.0.1")))
		e.waitEvent(t, ns, "outside", "AddressNotInPool", "address 10.99.0.1 is not in any pool of the cloud-config")
		e.create(t, ns, lbService("bad", withAnnotation(annotation.IPs, "192.0.2.300")))
		e.waitEvent(t, ns, "bad", "InvalidLoadBalancerRequest", `lb.baremetal.io/ips="192.0.2.300": "192.0.2.300" is not an IP address`)
		e.create(t, ns, lbService("nopool", withAnnotation(annotation.Pool, "nope")))
		e.waitEvent(t, ns, "nopool", "UnknownPool", `pool "nope" is not defined in the cloud-config`)

		// Moving to a taken address is refused and the Service keeps its own.
		e.patchAnnotation(t, ns, "by-annotation", annotation.IPs, "192.0.2.11")
		e.waitEvent(t, ns, "by-annotation", "AddressInUse", "the Service keeps 192.0.2.10")
		// Moving to a free one works.
		e.patchAnnotation(t, ns, "by-annotation", annotation.IPs, "192.0.2.12")
		poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
			got := e.ingressOf(t, ns, "by-annotation")
			return slices.Equal(got, []string{"192.0.2.12"}), fmt.Sprintf("by-annotation has %v, want [192.0.2.12]", got)
		})
	})

	t.Run("sharing", func(t *testing.T) {
		ns := e.namespace(t)
		shared := withAnnotation(annotation.AllowSharedIP, ns)
		e.create(t, ns, lbService("web", shared, withPort(corev1.ProtocolTCP, 80)))
		web := e.waitIngress(t, ns, "web", 1)
		e.create(t, ns, lbService("dns", shared, withPort(corev1.ProtocolUDP, 53)))
		if dns := e.waitIngress(t, ns, "dns", 1); !slices.Equal(dns, web) {
			t.Errorf("dns got %v, web %v: want the same address", dns, web)
		}
		e.create(t, ns, lbService("web2", shared, withPort(corev1.ProtocolTCP, 80)))
		e.waitEvent(t, ns, "web2", "AddressInUse", ns+"/web already uses port 80/TCP")
	})

	t.Run("delete releases", func(t *testing.T) {
		ns := e.namespace(t)
		single := withAnnotation(annotation.Pool, "single")
		e.create(t, ns, lbService("first", single))
		if got := e.waitIngress(t, ns, "first", 1); got[0] != "203.0.113.77" {
			t.Fatalf("first got %v", got)
		}
		if err := e.admin.CoreV1().Services(ns).Delete(context.Background(), "first", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
			_, err := e.admin.CoreV1().Services(ns).Get(ctx, "first", metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("first still exists (finalizer not removed?): %v", err)
		})
		e.create(t, ns, lbService("next", single))
		if got := e.waitIngress(t, ns, "next", 1); got[0] != "203.0.113.77" {
			t.Errorf("next got %v, want the released 203.0.113.77", got)
		}
		// Changing the type away from LoadBalancer releases too. The ccm may patch the
		// announcer in between: read again then.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := e.admin.CoreV1().Services(ns).Get(context.Background(), "next", metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Spec.Type = corev1.ServiceTypeClusterIP
			_, err = e.admin.CoreV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		e.waitIngress(t, ns, "next", 0)
		e.create(t, ns, lbService("after", single))
		if got := e.waitIngress(t, ns, "after", 1); got[0] != "203.0.113.77" {
			t.Errorf("after got %v, want the released 203.0.113.77", got)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		metrics := e.scrape(t, serving)
		for _, want := range []string{
			`baremetal_ccm_pool_addresses{family="IPv4",pool="default"} 4096`,
			`baremetal_ccm_pool_addresses{family="IPv6",pool="default"} 1.8446744073709552e+19`,
			`baremetal_ccm_pool_addresses_used{family="IPv4",pool="single"} 1`,
			`baremetal_ccm_address_refusals_total{reason="AddressInUse"}`,
			`baremetal_ccm_address_refusals_total{reason="UnknownPool"}`,
			`baremetal_ccm_address_releases_total`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	t.Run("race for one address", func(t *testing.T) {
		ns := e.namespace(t)
		const n = 20
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				svc := lbService(fmt.Sprint("racer-", i), withAnnotation(annotation.IPs, "192.0.2.99"))
				if _, err := e.admin.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
					t.Errorf("create %s: %v", svc.Name, err)
				}
			})
		}
		wg.Wait()
		poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
			list, err := e.admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			var holders []string
			refused := 0
			for _, svc := range list.Items {
				if len(svc.Status.LoadBalancer.Ingress) > 0 {
					holders = append(holders, svc.Name)
				} else if e.findEvent(ctx, ns, svc.Name, "AddressInUse", "") != "" {
					refused++
				}
			}
			if len(holders) > 1 {
				t.Fatalf("192.0.2.99 is held by %d Services: %v", len(holders), holders)
			}
			return len(holders) == 1 && refused == n-1, fmt.Sprintf("holders %v, %d refused with an event", holders, refused)
		})
	})
}

func (e *env) ingressOf(t testing.TB, ns, name string) []string {
	t.Helper()
	svc, err := e.admin.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ingress(t, svc)
}

func (e *env) patchAnnotation(t testing.TB, ns, name, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := e.admin.CoreV1().Services(ns).Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// scrape returns the ccm's metrics, read as the admin: the ccm authenticates and
// authorizes the request through the API server, with the rights the manifests give it.
func (e *env) scrape(t testing.TB, hostPort string) string {
	t.Helper()
	var code int
	var body string
	// The port opens a moment after the process starts.
	poll.Until(t, 10*time.Second, func(ctx context.Context) (bool, string) {
		var err error
		code, body, err = install.CCMMetrics(ctx, e.cp.AdminConfig(), hostPort)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d: %s", code, body)
	}
	return body
}
