package announcer

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// noRebalance keeps the tests of maintenance to what maintenance moves.
const noRebalance = defaultConfig + "failover:\n  rebalance: false\n"

// updateNode changes a Node in the API, and waits for the cache to see it.
func (tc *testController) updateNode(t *testing.T, name string, change func(*v1.Node)) {
	t.Helper()
	n, err := tc.client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(n)
	if _, err := tc.client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the cache to see Node "+name, func() bool {
		got, err := tc.nodes.Get(name)
		return err == nil && apiequality.Semantic.DeepEqual(got.Annotations, n.Annotations) && apiequality.Semantic.DeepEqual(got.Spec, n.Spec)
	})
}

// setDrain writes the drain annotation of a Node, or removes it for "".
func setDrain(value string) func(*v1.Node) {
	return func(n *v1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		if value == "" {
			delete(n.Annotations, annotation.Drain)
		} else {
			n.Annotations[annotation.Drain] = value
		}
	}
}

// newMaintenanceController returns a controller under yaml with the Service web on
// 198.51.100.1 announced by node-a, of nodes node-a and node-b, decided once.
func newMaintenanceController(t *testing.T, yaml string) *testController {
	t.Helper()
	tc := newTestControllerWithConfig(t, yaml, announcedBy(lbService("web", "198.51.100.1"), "node-a"), node("node-a", nil), node("node-b", nil))
	tc.syncKey(t, "address/198.51.100.1")
	tc.settle(t, "web")
	if got := tc.announcer(t, "web"); got != "node-a" {
		t.Fatalf("announcer %q, want node-a", got)
	}
	tc.events()
	return tc
}

// TestDrainAnnotation checks that the drain annotation moves the address off its node
// with an event naming it, keeps the node out of the standbys, and that removing it lets
// the node stand by again without taking the address back.
func TestDrainAnnotation(t *testing.T) {
	tc := newMaintenanceController(t, noRebalance)
	tc.updateNode(t, "node-a", setDrain("true"))
	tc.syncKey(t, "address/198.51.100.1")
	tc.settle(t, "web")
	if got := tc.announcer(t, "web"); got != "node-b" {
		t.Fatalf("announcer %q of a drained node-a, want node-b", got)
	}
	want := `Normal AnnouncerChanged Announcer of 198.51.100.1 changed from "node-a" to "node-b": node-a is drained by the annotation lb.baremetal.io/drain`
	if ev := tc.events(); !slices.Contains(ev, want) {
		t.Errorf("events %q, want %q", ev, want)
	}
	if got := tc.service(t, "web").Annotations[annotation.Standbys]; got != "" {
		t.Errorf("standbys %q, want none: node-a is drained", got)
	}

	tc.updateNode(t, "node-a", setDrain("false"))
	tc.syncKey(t, "address/198.51.100.1")
	tc.settle(t, "web")
	svc := tc.service(t, "web")
	if got := svc.Annotations[annotation.Announcer]; got != "node-b" {
		t.Errorf("announcer %q once node-a is no longer drained, want node-b kept: no failback", got)
	}
	if got := svc.Annotations[annotation.Standbys]; got != "node-a" {
		t.Errorf("standbys %q once node-a is no longer drained, want node-a", got)
	}
}

// TestDrainAnnotationInvalid checks that a drain value other than true or false moves
// nothing and is told in a Warning event on the Node naming the key and the value.
func TestDrainAnnotationInvalid(t *testing.T) {
	tc := newMaintenanceController(t, noRebalance)
	tc.updateNode(t, "node-a", setDrain("yes"))
	var ev []string
	poll(t, "a Warning event on node-a", func() bool {
		ev = append(ev, tc.events()...)
		return len(ev) > 0
	})
	want := `Warning InvalidNodeAnnotation lb.baremetal.io/drain="yes": want "true" or "false"; the node is not drained by it`
	if len(ev) != 1 || !strings.HasPrefix(ev[0], want) {
		t.Errorf("events %q, want one starting %q", ev, want)
	}
	tc.syncKey(t, "address/198.51.100.1")
	if got := tc.announcer(t, "web"); got != "node-a" {
		t.Errorf("announcer %q with a drain value that cannot be read, want node-a kept", got)
	}
}

// TestCordon checks that cordoning moves nothing unless maintenance.drainOnCordon is on,
// and then moves the address as a drain does, saying why.
func TestCordon(t *testing.T) {
	cordon := func(n *v1.Node) { n.Spec.Unschedulable = true }
	t.Run("off by default", func(t *testing.T) {
		tc := newMaintenanceController(t, noRebalance)
		tc.updateNode(t, "node-a", cordon)
		tc.syncKey(t, "address/198.51.100.1")
		if got := tc.announcer(t, "web"); got != "node-a" {
			t.Errorf("announcer %q of a cordoned node-a, want node-a kept", got)
		}
		if ev := tc.events(); len(ev) != 0 {
			t.Errorf("events %q, want none", ev)
		}
	})
	t.Run("drainOnCordon", func(t *testing.T) {
		tc := newMaintenanceController(t, noRebalance+"maintenance:\n  drainOnCordon: true\n")
		tc.updateNode(t, "node-a", cordon)
		tc.syncKey(t, "address/198.51.100.1")
		if got := tc.announcer(t, "web"); got != "node-b" {
			t.Errorf("announcer %q of a cordoned node-a with drainOnCordon, want node-b", got)
		}
		want := `node-a is drained as it is cordoned (spec.unschedulable) and maintenance.drainOnCordon is on`
		if ev := tc.events(); len(ev) != 1 || !strings.HasSuffix(ev[0], want) {
			t.Errorf("events %q, want one ending %q", ev, want)
		}
	})
}

// TestOutOfServiceTaint checks that a node tainted out of service loses its address,
// though its agent answers, with the taint named.
func TestOutOfServiceTaint(t *testing.T) {
	tc := newMaintenanceController(t, noRebalance)
	tc.updateNode(t, "node-a", func(n *v1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute})
	})
	tc.syncKey(t, "address/198.51.100.1")
	if got := tc.announcer(t, "web"); got != "node-b" {
		t.Errorf("announcer %q of a node out of service, want node-b", got)
	}
	want := `node-a is out of service by the taint node.kubernetes.io/out-of-service`
	if ev := tc.events(); len(ev) != 1 || !strings.HasSuffix(ev[0], want) {
		t.Errorf("events %q, want one ending %q", ev, want)
	}
}
