package ccm

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// The condition types the ccm writes, as KEP-4631 names them.
const (
	provisioning = "LoadBalancerProvisioning"
	serving      = "LoadBalancerServing"
	degraded     = "LoadBalancerDegraded"
)

// cond is what a test expects of one condition: its status and reason, and text its
// message contains. A zero cond expects the condition absent.
type cond struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// waitConditions waits until the Service's conditions of the ccm's types are want, each
// observing the Service's generation, and returns the Service.
func (e *env) waitConditions(t testing.TB, ns, name string, want map[string]cond) *corev1.Service {
	t.Helper()
	var svc *corev1.Service
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		var err error
		if svc, err = e.admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		for _, typ := range []string{provisioning, serving, degraded} {
			w, got := want[typ], meta.FindStatusCondition(svc.Status.Conditions, typ)
			switch {
			case w == cond{} && got == nil:
				continue
			case w == cond{}:
				return false, fmt.Sprintf("%s/%s has %s=%s/%s, want none; conditions: %s", ns, name, typ, got.Status, got.Reason, showConditions(svc))
			case got == nil || got.Status != w.status || got.Reason != w.reason || !strings.Contains(got.Message, w.message):
				return false, fmt.Sprintf("%s/%s: want %s=%s/%s saying %q; conditions: %s", ns, name, typ, w.status, w.reason, w.message, showConditions(svc))
			case got.ObservedGeneration != svc.Generation || got.LastTransitionTime.IsZero():
				return false, fmt.Sprintf("%s/%s: %s observes generation %d (the Service is at %d), lastTransitionTime %v", ns, name, typ, got.ObservedGeneration, svc.Generation, got.LastTransitionTime)
			}
		}
		return true, ""
	})
	return svc
}

func showConditions(svc *corev1.Service) string {
	var s []string
	for _, c := range svc.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s/%s %q", c.Type, c.Status, c.Reason, c.Message))
	}
	return "[" + strings.Join(s, "; ") + "]"
}

// serviceWrites returns the writes of Services and their status the API server served.
func (e *env) serviceWrites(t testing.TB) float64 {
	w := e.apiWrites(t)
	return w["services"] + w["services/status"]
}

// TestConditions walks a Service through every state its load-balancer conditions tell,
// on the real API server with the real ccm, and checks that someone else's condition
// stays throughout, that a hand edit is put back, and that steady state writes nothing.
func TestConditions(t *testing.T) {
	e := setup(t)
	_, metricsAddr := e.startServingCCM(t)
	ns := e.namespace(t)
	const name = "cond"

	// Local, so that a node announces only with an endpoint; and first of a pool that
	// does not exist, so that no pool can serve it.
	svc := lbService(name, withAnnotation(annotation.Pool, "no-such-pool"))
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	e.create(t, ns, svc)
	// Someone else's condition, applied as another field manager: the ccm leaves it be.
	foreign := metav1ac.Condition().WithType("example.com/Monitored").WithStatus(metav1.ConditionTrue).
		WithReason("Probed").WithMessage("someone else's").WithLastTransitionTime(metav1.Now())
	if _, err := e.admin.CoreV1().Services(ns).ApplyStatus(t.Context(),
		corev1ac.Service(name, ns).WithStatus(corev1ac.ServiceStatus().WithConditions(foreign)),
		metav1.ApplyOptions{FieldManager: "example-monitor"}); err != nil {
		t.Fatal(err)
	}
	foreignKept := func(t *testing.T, svc *corev1.Service) {
		t.Helper()
		if c := meta.FindStatusCondition(svc.Status.Conditions, "example.com/Monitored"); c == nil || c.Message != "someone else's" {
			t.Errorf("someone else's condition is %+v, want it kept", c)
		}
	}

	t.Run("no pool can serve it", func(t *testing.T) {
		e.waitEvent(t, ns, name, "UnknownPool", "no-such-pool")
		svc := e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionTrue, "Provisioning", "Waiting for an address"},
			serving:      {metav1.ConditionFalse, "Provisioning", "no address"},
		})
		foreignKept(t, svc)
	})

	var addr string
	t.Run("an address, no ready endpoint", func(t *testing.T) {
		e.patchAnnotation(t, ns, name, annotation.Pool, "default")
		addr = e.waitIngress(t, ns, name, 1)[0]
		svc := e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionFalse, string(pick.ReasonNoLocalEndpoints), "No node announces " + addr},
			degraded:     {metav1.ConditionTrue, string(pick.ReasonNoLocalEndpoints), "externalTrafficPolicy is Local and no eligible node has a ready endpoint"},
		})
		foreignKept(t, svc)
	})

	t.Run("a node announces", func(t *testing.T) {
		e.setEndpoints(t, ns, name, "node-a")
		svc := e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionTrue, "Serving", "node-a announces " + addr},
		})
		foreignKept(t, svc)
	})

	t.Run("no node may announce", func(t *testing.T) {
		for _, n := range []string{"node-a", "node-b"} {
			e.labelNode(t, n, pick.ExcludeLabel, ptr.To(""))
			t.Cleanup(func() { e.labelNode(t, n, pick.ExcludeLabel, nil) })
		}
		e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionFalse, string(pick.ReasonNoEligibleNode), "No node announces " + addr},
			degraded:     {metav1.ConditionTrue, string(pick.ReasonNoEligibleNode), "node-a is excluded by the label " + pick.ExcludeLabel},
		})
		for _, n := range []string{"node-a", "node-b"} {
			e.labelNode(t, n, pick.ExcludeLabel, nil)
		}
		e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionTrue, "Serving", "node-a announces " + addr},
		})
	})

	t.Run("steady state writes nothing", func(t *testing.T) {
		// Quiet is 5 s without a write of a Service: the writes of the steps before
		// (the upstream controller's, the conditions of the other tests' Services, which
		// this ccm took up when it started) have to end.
		before := e.serviceWrites(t)
		poll.Until(t, time.Minute, func(context.Context) (bool, string) {
			time.Sleep(5 * time.Second)
			now := e.serviceWrites(t)
			quiet := now == before
			before = now
			return quiet, "Services are still written"
		})
		written := e.metricValue(t, metricsAddr, "baremetal_ccm_condition_writes_total")
		if written == 0 {
			t.Error("baremetal_ccm_condition_writes_total is 0 after the conditions changed")
		}
		time.Sleep(5 * time.Second)
		if n := e.serviceWrites(t) - before; n != 0 {
			t.Errorf("%v writes of Services in 5 s of steady state, want none", n)
		}
		if n := e.metricValue(t, metricsAddr, "baremetal_ccm_condition_writes_total"); n != written {
			t.Errorf("baremetal_ccm_condition_writes_total went from %v to %v in steady state", written, n)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		kubectl, err := controlplane.Binary("kubectl")
		if err != nil {
			ci.Missing(t, "%v; run `make tools`", err)
		}
		kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
		if err := install.WriteKubeconfig(e.cp.AdminConfig(), kubeconfig); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) string {
			t.Helper()
			out, err := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig=" + kubeconfig, "-n", ns}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		run("wait", "--for=condition="+serving, "--timeout=10s", "svc/"+name)
		// As docs/operations.md shows it.
		var got []metav1.Condition
		out := run("get", "svc", name, "-o", "jsonpath={.status.conditions}")
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("kubectl get svc -o jsonpath={.status.conditions}: %v\n%s", err, out)
		}
		if c := meta.FindStatusCondition(got, serving); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("kubectl get svc -o jsonpath={.status.conditions} shows no %s True:\n%s", serving, out)
		}
		t.Logf("kubectl get svc %s -o jsonpath='{.status.conditions}':\n%s", name, out)
	})

	t.Run("edited by hand", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := e.admin.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c := meta.FindStatusCondition(svc.Status.Conditions, serving)
			if c == nil {
				return fmt.Errorf("%s/%s has no %s condition to edit: %s", ns, name, serving, showConditions(svc))
			}
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, "ByHand", "edited"
			_, err = e.admin.CoreV1().Services(ns).UpdateStatus(t.Context(), svc, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		svc := e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionTrue, "Serving", "node-a announces " + addr},
		})
		foreignKept(t, svc)
	})

	t.Run("the ccm cut off from the agents", func(t *testing.T) {
		// Both agents stop answering at once: more than failover.isolationShare of them,
		// which the ccm takes for its own isolation. It keeps node-a as the announcer.
		for _, n := range []string{"node-a", "node-b"} {
			e.agents[n].stop()
			t.Cleanup(func() {
				if err := e.agents[n].start(); err != nil {
					t.Error(err)
				}
			})
		}
		e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionTrue, "Serving", "node-a announces " + addr},
			degraded:     {metav1.ConditionTrue, "CCMIsolated", "node-a's among them"},
		})
		for _, n := range []string{"node-a", "node-b"} {
			if err := e.agents[n].start(); err != nil {
				t.Fatal(err)
			}
		}
		e.waitConditions(t, ns, name, map[string]cond{
			provisioning: {metav1.ConditionFalse, "Complete", addr},
			serving:      {metav1.ConditionTrue, "Serving", "node-a announces " + addr},
		})
		e.waitAnnouncer(t, ns, name, "node-a")
	})

	t.Run("no longer a load balancer", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := e.admin.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Spec.Type = corev1.ServiceTypeClusterIP
			svc.Spec.ExternalTrafficPolicy = ""
			svc.Spec.AllocateLoadBalancerNodePorts = nil
			svc.Spec.HealthCheckNodePort = 0
			_, err = e.admin.CoreV1().Services(ns).Update(t.Context(), svc, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		svc := e.waitConditions(t, ns, name, nil)
		foreignKept(t, svc)
	})
}
