package ccm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// setEndpoints replaces the Service's one EndpointSlice with ready endpoints on nodes.
func (e *env) setEndpoints(t testing.TB, ns, svc string, nodes ...string) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   svc + "-slice",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i, n := range nodes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.0.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(n),
		})
	}
	client := e.admin.DiscoveryV1().EndpointSlices(ns)
	ctx := context.Background()
	if old, err := client.Get(ctx, slice.Name, metav1.GetOptions{}); err == nil {
		slice.ResourceVersion = old.ResourceVersion
		_, err = client.Update(ctx, slice, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := client.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAnnouncer waits until the Service's announcer annotation is want ("" for none).
func (e *env) waitAnnouncer(t testing.TB, ns, name, want string) {
	t.Helper()
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		svc, err := e.admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got, ok := svc.Annotations[annotation.Announcer]
		return got == want && ok == (want != ""), fmt.Sprintf("%s/%s announcer %q (set: %v), want %q", ns, name, got, ok, want)
	})
}

// waitAnyAnnouncer waits until the Service has an announcer, and returns it.
func (e *env) waitAnyAnnouncer(t testing.TB, ns, name string) string {
	t.Helper()
	var got string
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		svc, err := e.admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = svc.Annotations[annotation.Announcer]
		return got != "", fmt.Sprintf("%s/%s has no announcer", ns, name)
	})
	return got
}

func (e *env) labelNode(t testing.TB, node, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := e.admin.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAnnouncer checks that the ccm publishes the announcing node of every Service as the
// endpoints, nodes and annotations change.
func TestAnnouncer(t *testing.T) {
	e := setup(t)
	_, serving := e.startServingCCM(t)

	t.Run("cluster follows endpoints", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("web"))
		e.waitIngress(t, ns, "web", 1)
		// The upstream controller ensures a new Service twice: before and after its
		// finalizer is on.
		ensured := e.waitEvents(t, ns, "web", "EnsuredLoadBalancer", 2)
		e.setEndpoints(t, ns, "web", "node-b")
		e.waitAnnouncer(t, ns, "web", "node-b")
		e.setEndpoints(t, ns, "web", "node-a", "node-a", "node-b")
		e.waitAnnouncer(t, ns, "web", "node-a")
		e.waitEvent(t, ns, "web", "AnnouncerChanged", `changed from "node-b" to "node-a": node-a has more ready endpoints (2) than node-b (1)`)
		// An announcer change is ours alone: the upstream service controller must not
		// take the annotation for a change of the load balancer and ensure it again. An
		// annotation of the user's, written after them, is one it ensures, and it takes
		// the Service's changes in order: once that ensure is in, any the announcer
		// changes caused are too.
		before := e.countEvents(t, ns, "web", "EnsuredLoadBalancer")
		e.patchAnnotation(t, ns, "web", "example.com/after-announcer-changes", "true")
		if n := e.waitEvents(t, ns, "web", "EnsuredLoadBalancer", before+1); n != ensured+1 {
			t.Errorf("%d EnsuredLoadBalancer events after two announcer changes and an annotation of the user's, want %d: one for the user's annotation alone", n, ensured+1)
		}
	})

	t.Run("local needs a local endpoint", func(t *testing.T) {
		ns := e.namespace(t)
		local := lbService("local")
		local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		e.create(t, ns, local)
		e.waitIngress(t, ns, "local", 1)
		e.waitEvent(t, ns, "local", "NoAnnouncer", "externalTrafficPolicy is Local and no eligible node has a ready endpoint")
		e.waitAnnouncer(t, ns, "local", "")
		e.setEndpoints(t, ns, "local", "node-a")
		e.waitAnnouncer(t, ns, "local", "node-a")
		e.setEndpoints(t, ns, "local")
		e.waitAnnouncer(t, ns, "local", "")
	})

	t.Run("preferred nodes", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("pref", withAnnotation(annotation.PreferredNodes, "node-x, node-b")))
		e.waitIngress(t, ns, "pref", 1)
		e.waitAnnouncer(t, ns, "pref", "node-b")
	})

	t.Run("exclusion label", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("excl", withAnnotation(annotation.PreferredNodes, "node-a")))
		e.waitIngress(t, ns, "excl", 1)
		e.waitAnnouncer(t, ns, "excl", "node-a")
		e.labelNode(t, "node-a", pick.ExcludeLabel, ptr.To(""))
		t.Cleanup(func() { e.labelNode(t, "node-a", pick.ExcludeLabel, nil) })
		e.waitAnnouncer(t, ns, "excl", "node-b")
		e.waitEvent(t, ns, "excl", "AnnouncerChanged", "node-a is excluded by the label "+pick.ExcludeLabel)
	})

	t.Run("pool nodeSelector", func(t *testing.T) {
		ns := e.namespace(t)
		e.labelNode(t, "node-b", "edge", ptr.To("true"))
		t.Cleanup(func() { e.labelNode(t, "node-b", "edge", nil) })
		e.create(t, ns, lbService("edge", withAnnotation(annotation.Pool, "edge")))
		e.waitIngress(t, ns, "edge", 1)
		// Endpoints on node-a count for nothing: node-a may not announce this pool.
		e.setEndpoints(t, ns, "edge", "node-a")
		e.waitAnnouncer(t, ns, "edge", "node-b")
	})

	t.Run("shared address has one announcer", func(t *testing.T) {
		ns := e.namespace(t)
		shared := withAnnotation(annotation.AllowSharedIP, "announcer-"+ns)
		e.create(t, ns, lbService("one", shared, withPort(corev1.ProtocolTCP, 80)))
		e.create(t, ns, lbService("two", shared, withPort(corev1.ProtocolTCP, 443)))
		e.waitIngress(t, ns, "one", 1)
		e.waitIngress(t, ns, "two", 1)
		// Endpoints of both count together: two on node-b against one on node-a.
		e.setEndpoints(t, ns, "one", "node-a", "node-b")
		e.setEndpoints(t, ns, "two", "node-b")
		e.waitAnnouncer(t, ns, "one", "node-b")
		e.waitAnnouncer(t, ns, "two", "node-b")
	})

	t.Run("agent stops answering, and comes back", func(t *testing.T) {
		ns := e.namespace(t)
		e.create(t, ns, lbService("failover"))
		e.waitIngress(t, ns, "failover", 1)
		e.setEndpoints(t, ns, "failover", "node-a", "node-b")
		from := e.waitAnyAnnouncer(t, ns, "failover")
		to := map[string]string{"node-a": "node-b", "node-b": "node-a"}[from]
		e.agents[from].stop()
		t.Cleanup(func() {
			// Back for the subtests that follow, should this one end before it restarts it.
			if err := e.agents[from].start(); err != nil {
				t.Error(err)
			}
		})
		e.waitAnnouncer(t, ns, "failover", to)
		e.waitEvent(t, ns, "failover", "AnnouncerChanged", from+" agent not answering")
		// No failback: the returning node is up again after three answers (300 ms), and
		// the address stays where it is. The plan computed once it is back keeps the
		// announcer and holds back the standbys that would name it again (a node back
		// from down may be flapping), which the held writes count; a failback would
		// write the announcer instead.
		held := e.metricValue(t, serving, "baremetal_ccm_standby_writes_held_total")
		if err := e.agents[from].start(); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
			n := e.metricValue(t, serving, "baremetal_ccm_standby_writes_held_total")
			return n > held, fmt.Sprintf("baremetal_ccm_standby_writes_held_total %v, want more than %v: no plan computed with %s back keeps the announcer", n, held, from)
		})
		e.waitAnnouncer(t, ns, "failover", to)
		metrics := e.scrape(t, serving)
		if !strings.Contains(metrics, `baremetal_ccm_agents{state="up"} 2`) {
			t.Errorf("metrics do not say both agents are up:\n%s", grepLines(metrics, "baremetal_ccm_agents"))
		}
	})

	t.Run("metrics", func(t *testing.T) {
		metrics := e.scrape(t, serving)
		for _, want := range []string{
			`baremetal_ccm_announced_services{node="node-b"}`,
			"baremetal_ccm_services_without_announcer ", // the Local Service without endpoints, at least
			`baremetal_ccm_announcer_changes_total{reason="ReadyEndpoints"}`,
			`baremetal_ccm_announcer_changes_total{reason="NoLocalEndpoints"}`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(metrics, "baremetal_ccm_services_without_announcer 0") {
			t.Error("baremetal_ccm_services_without_announcer is 0 with the Local Service unannounced")
		}
	})
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
