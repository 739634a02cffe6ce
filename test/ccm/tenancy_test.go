package ccm

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// TestRequestRules checks, on one ccm, the rules about what a Service may ask for that
// matter once a cluster has several teams: sharing stays within a namespace, a Local
// Service is only announced where it has a pod, every pool's nodeSelector holds, a
// sharing key takes effect at once, and a status that lies is corrected.
func TestRequestRules(t *testing.T) {
	e := setup(t)
	e.startCCM(t)

	t.Run("a sharing key is scoped to its namespace", func(t *testing.T) {
		teamA, teamB := e.namespace(t), e.namespace(t)
		key := withAnnotation(annotation.AllowSharedIP, "web")
		e.create(t, teamA, lbService("web", key, withPort(corev1.ProtocolTCP, 80)))
		a := e.waitIngress(t, teamA, "web", 1)[0]
		// Same key, another namespace, a port team-a does not use: its own address.
		e.create(t, teamB, lbService("web", key, withPort(corev1.ProtocolTCP, 443)))
		if b := e.waitIngress(t, teamB, "web", 1)[0]; b == a {
			t.Fatalf("%s/web got %s/web's address %s", teamB, teamA, a)
		}
		// Asking for team-a's address outright is refused, naming the holder.
		e.create(t, teamB, lbService("thief", withAnnotation(annotation.AllowSharedIP, "thief"), withPort(corev1.ProtocolTCP, 8443), withAnnotation(annotation.IPs, a)))
		e.waitEvent(t, teamB, "thief", "AddressInUse", "address "+a+" is already assigned to "+teamA+"/web")
		if got := e.ingressOf(t, teamB, "thief"); len(got) != 0 {
			t.Errorf("%s/thief holds %v", teamB, got)
		}
		// A squatter in team-b holding ports 80 and 443 under the key blocks nobody in
		// team-a.
		e.create(t, teamB, lbService("squat", withAnnotation(annotation.AllowSharedIP, "api"),
			func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}}
			}))
		squat := e.waitIngress(t, teamB, "squat", 1)[0]
		e.create(t, teamA, lbService("api", withAnnotation(annotation.AllowSharedIP, "api"), withPort(corev1.ProtocolTCP, 443)))
		if got := e.waitIngress(t, teamA, "api", 1)[0]; got == squat {
			t.Errorf("%s/api got the squatter's address %s", teamA, got)
		}
		// Both sides opting in share.
		both := func(ns, other string, port int32) *corev1.Service {
			return lbService("both", withAnnotation(annotation.AllowSharedIP, "both"),
				withAnnotation(annotation.SharedIPNamespaces, other), withPort(corev1.ProtocolTCP, port))
		}
		e.create(t, teamA, both(teamA, teamB, 80))
		e.create(t, teamB, both(teamB, teamA, 443))
		if x, y := e.waitIngress(t, teamA, "both", 1)[0], e.waitIngress(t, teamB, "both", 1)[0]; x != y {
			t.Errorf("both namespaces opted in, addresses %s and %s, want one", x, y)
		}
	})

	t.Run("local means local", func(t *testing.T) {
		ns := e.namespace(t)
		key := withAnnotation(annotation.AllowSharedIP, "mixed")
		local := lbService("local", key, withPort(corev1.ProtocolTCP, 80))
		local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		e.create(t, ns, local)
		e.create(t, ns, lbService("cluster", key, withPort(corev1.ProtocolTCP, 443)))
		if a, b := e.waitIngress(t, ns, "local", 1)[0], e.waitIngress(t, ns, "cluster", 1)[0]; a != b {
			t.Fatalf("the two Services do not share: %s and %s", a, b)
		}
		// Three pods of the Cluster Service on node-b, one of the Local Service on node-a:
		// node-b would drop all of the Local Service's traffic.
		e.setEndpoints(t, ns, "cluster", "node-b", "node-b", "node-b")
		e.setEndpoints(t, ns, "local", "node-a")
		e.waitAnnouncer(t, ns, "local", "node-a")
		e.waitAnnouncer(t, ns, "cluster", "node-a")
		// The Local Service's pod goes: no node has one of its pods, so nobody announces.
		e.setEndpoints(t, ns, "local")
		e.waitAnnouncer(t, ns, "cluster", "")
		e.waitEvent(t, ns, "local", "NoAnnouncer", "externalTrafficPolicy is Local and no eligible node has a ready endpoint of "+ns+"/local")
	})

	t.Run("every pool's nodeSelector", func(t *testing.T) {
		ns := e.namespace(t)
		// IPv4 from pool edge (edge=true), IPv6 from pool edge6 (edge6=true).
		e.labelNode(t, "node-b", "edge", ptr.To("true"))
		t.Cleanup(func() { e.labelNode(t, "node-b", "edge", nil) })
		e.create(t, ns, lbService("dual", withAnnotation(annotation.IPs, "203.0.113.9,fd00:ed6e::9"),
			withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
		e.waitIngress(t, ns, "dual", 2)
		e.setEndpoints(t, ns, "dual", "node-b")
		// node-b matches edge's selector only: no node may announce.
		e.waitEvent(t, ns, "dual", "NoAnnouncer", "node-b does not match the nodeSelector of pool edge6")
		e.waitAnnouncer(t, ns, "dual", "")
		e.labelNode(t, "node-a", "edge", ptr.To("true"))
		e.labelNode(t, "node-a", "edge6", ptr.To("true"))
		t.Cleanup(func() {
			e.labelNode(t, "node-a", "edge", nil)
			e.labelNode(t, "node-a", "edge6", nil)
		})
		// node-a matches both, though the endpoint is on node-b.
		e.waitAnnouncer(t, ns, "dual", "node-a")
	})

	t.Run("a sharing key takes effect at once", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("group", withAnnotation(annotation.AllowSharedIP, "g"), withPort(corev1.ProtocolTCP, 80)))
		e.create(t, ns, lbService("joiner", withPort(corev1.ProtocolTCP, 443)))
		shared := e.waitIngress(t, ns, "group", 1)[0]
		e.waitIngress(t, ns, "joiner", 1)
		e.setEndpoints(t, ns, "group", "node-b", "node-b")
		e.setEndpoints(t, ns, "joiner", "node-a")
		e.waitAnnouncer(t, ns, "group", "node-b")
		e.waitAnnouncer(t, ns, "joiner", "node-a")

		e.patchAnnotation(t, ns, "joiner", annotation.AllowSharedIP, "g")
		start := time.Now()
		var took time.Duration
		poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
			svc, err := e.admin.CoreV1().Services(ns).Get(ctx, "joiner", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got := ingress(t, svc)
			took = time.Since(start)
			return slices.Equal(got, []string{shared}) && svc.Annotations[annotation.Announcer] == "node-b",
				fmt.Sprintf("joiner has %v announced by %q, want %s by node-b", got, svc.Annotations[annotation.Announcer], shared)
		})
		t.Logf("the joiner had the group's address and announcer %v after the key was set", took)
		if took > time.Second {
			t.Errorf("the joiner took %v to join its group's announcer, want under a second", took)
		}
		e.waitAnnouncer(t, ns, "group", "node-b")
	})

	t.Run("a status that lies is corrected", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("holder"))
		e.create(t, ns, lbService("liar"))
		held := e.waitIngress(t, ns, "holder", 1)[0]
		own := e.waitIngress(t, ns, "liar", 1)[0]
		// The upstream service controller ensures a new Service twice (before and after
		// its finalizer is on), writing the status each time; the announcer comes after.
		e.waitAnyAnnouncer(t, ns, "liar")
		want := "status.loadBalancer.ingress listed " + held + ", which " + ns + "/holder holds and lacked " + own + "; restored it to " + own
		// The announcer's write makes the upstream controller ensure the Service once
		// more, writing the status it computed before the edit: when that write lands
		// after the edit, it undoes the lie before this ccm sees it, and there is no
		// event to find. The lie is then told again; that controller writes no more.
		for attempt := 1; ; attempt++ {
			svc, err := e.admin.CoreV1().Services(ns).Get(context.Background(), "liar", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: held, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
			if _, err := e.admin.CoreV1().Services(ns).UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
				got := e.ingressOf(t, ns, "liar")
				return slices.Equal(got, []string{own}), fmt.Sprintf("liar's status %v, want %s back", got, own)
			})
			took := time.Since(start)
			t.Logf("the status was corrected %v after the edit", took)
			if took > time.Second {
				t.Errorf("the status was corrected after %v, want under a second", took)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				return e.findEvent(ctx, ns, "liar", "StatusCorrected", want) != "", nil
			})
			cancel()
			if err == nil {
				break
			}
			if attempt == 3 {
				t.Fatalf("the status was corrected %d times, never with a StatusCorrected event saying %q", attempt, want)
			}
			t.Logf("corrected without an event: the upstream controller's write came after the edit; lying again")
		}
		if got := e.ingressOf(t, ns, "holder"); !slices.Equal(got, []string{held}) {
			t.Errorf("the holder's status is %v, want %s", got, held)
		}
	})
}

// TestConfigReload checks that the ccm follows its cloud-config file: a pool removed
// gives its Services new addresses, a pool added serves the Services waiting for it, and
// an invalid file is refused with the last good one kept.
func TestConfigReload(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	// A pool for this test's namespace alone, first so that its Services draw from it.
	moving := fmt.Sprintf("- name: moving\n  addresses: [198.18.40.0/28]\n  namespaces: [%s]\n", ns)
	later := fmt.Sprintf("- name: later\n  addresses: [198.18.41.0/28]\n  autoAssign: false\n  namespaces: [%s]\n", ns)
	base, err := e.readConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := e.writeConfig(t, "reload.yaml", strings.Replace(base, "pools:\n", "pools:\n"+moving, 1))
	_, serving := e.startServingCCM(t, "--cloud-config="+path, "--cloud-config-reload-interval=100ms")

	e.create(t, ns, lbService("mover"))
	inPrefix(t, e.waitIngress(t, ns, "mover", 1)[0], "198.18.40.0/28")
	e.create(t, ns, lbService("waiter", withAnnotation(annotation.Pool, "later")))
	e.waitEvent(t, ns, "waiter", "UnknownPool", "later")

	e.writeConfig(t, "reload.yaml", "pools: [this is not a pool\n")
	poll.Until(t, assignTimeout, func(context.Context) (bool, string) {
		m := e.scrape(t, serving)
		return strings.Contains(m, `baremetal_cloud_config_reloads_total{result="invalid"} 1`) &&
			strings.Contains(m, "baremetal_cloud_config_last_reload_successful 0"), grepLines(m, "baremetal_cloud_config")
	})
	// The last good file is kept: the mover keeps its address.
	inPrefix(t, e.ingressOf(t, ns, "mover")[0], "198.18.40.0/28")

	e.writeConfig(t, "reload.yaml", strings.Replace(base, "pools:\n", "pools:\n"+later, 1))
	inPrefix(t, e.waitIngressIn(t, ns, "mover", "198.18.0.0/20"), "198.18.0.0/20")
	e.waitEvent(t, ns, "mover", "AddressNotInPool", "is in no pool of the cloud-config any more; this Service gets another address")
	inPrefix(t, e.waitIngressIn(t, ns, "waiter", "198.18.41.0/28"), "198.18.41.0/28")
	m := e.scrape(t, serving)
	if !strings.Contains(m, `baremetal_cloud_config_reloads_total{result="applied"} 1`) || !strings.Contains(m, "baremetal_cloud_config_last_reload_successful 1") {
		t.Errorf("metrics after a good reload:\n%s", grepLines(m, "baremetal_cloud_config"))
	}
}

// waitIngressIn waits until the Service's first address lies in prefix, and returns it.
func (e *env) waitIngressIn(t testing.TB, ns, name, prefix string) string {
	t.Helper()
	var got []string
	poll.Until(t, assignTimeout, func(context.Context) (bool, string) {
		got = e.ingressOf(t, ns, name)
		return len(got) > 0 && prefixContains(prefix, got[0]), fmt.Sprintf("%s/%s has %v, want an address in %s", ns, name, got, prefix)
	})
	return got[0]
}

func prefixContains(prefix, addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && netip.MustParsePrefix(prefix).Contains(a)
}

// readConfig returns the cloud-config the shared ccm runs with.
func (e *env) readConfig() (string, error) {
	data, err := os.ReadFile(e.config)
	return string(data), err
}

// writeConfig replaces the file name in the env's directory with content, as a rename so
// that a reload never reads half a file, and returns its path.
func (e *env) writeConfig(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path+".new", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	return path
}
