package prober

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

// setOutOfService adds the taint node.kubernetes.io/out-of-service to a Node, or removes
// it.
func setOutOfService(t *testing.T, client kubernetes.Interface, node string, on bool) {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == v1.TaintNodeOutOfService })
	if on {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute})
	}
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOutOfServiceIsDown checks that a node tainted out of service is down at once though
// its agent answers, and in the verdict the agents hold, so that its standbys take over;
// the announcer hears of it; and once the taint is gone its probes decide again.
func TestOutOfServiceIsDown(t *testing.T) {
	port := agentPort(t)
	rA, _ := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	rB, _ := startResponder(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	cfg := config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port}
	p, changes, client := startProberClient(t, cfg, func(*Prober) {}, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	eventually(t, 2*time.Second, "both agents hold a first verdict naming no one", func() bool { return holds(p, rA) && holds(p, rB) })
	for len(changes) > 0 {
		<-changes
	}

	tainted := time.Now()
	setOutOfService(t, client, "node-a", true)
	// Well within one probe interval: the taint is no probe to wait for.
	eventually(t, time.Second, "node-a down in the verdict both agents hold", func() bool {
		return p.Health("node-a") == liveness.Down && holds(p, rA, "node-a") && holds(p, rB, "node-a")
	})
	if took := time.Since(tainted); took > 500*time.Millisecond {
		t.Errorf("node-a down in the verdict %v after its taint, want at once", took)
	}
	select {
	case n := <-changes:
		if n != "node-a" {
			t.Errorf("the announcer heard of %s, want node-a", n)
		}
	case <-time.After(time.Second):
		t.Error("the announcer was not told that node-a is down")
	}
	if got := p.Health("node-b"); got != liveness.Up {
		t.Errorf("node-b is %v, want up", got)
	}

	setOutOfService(t, client, "node-a", false)
	eventually(t, time.Second, "node-a up again, in no verdict", func() bool {
		return p.Health("node-a") == liveness.Up && holds(p, rA) && holds(p, rB)
	})
}

// TestOutOfServiceDuringIsolation checks that the operator's taint holds while the prober
// takes itself for cut off and keeps every other agent's state: the guard doubts the
// ccm's own probes, not the operator.
func TestOutOfServiceDuringIsolation(t *testing.T) {
	f := newFleet(t, 6)
	f.stop(0, 1, 2, 3, 4)
	eventually(t, 2*time.Second, "isolation", func() bool { return f.p.Isolation().Isolated })
	setOutOfService(t, f.client, f.name(0), true)
	eventually(t, time.Second, "node-0 down in the verdict", func() bool {
		return f.p.Health(f.name(0)) == liveness.Down && slices.Equal(f.p.Verdict().Down, []string{f.name(0)})
	})
	if !f.p.Isolation().Isolated {
		t.Error("the isolation ended with the taint")
	}
	for i := 1; i < 6; i++ {
		if got := f.p.Health(f.name(i)); got != liveness.Up {
			t.Errorf("%s is %v while the prober is isolated, want up as it was", f.name(i), got)
		}
	}
	f.restart(0, 1, 2, 3, 4)
	eventually(t, time.Second, "the end of the isolation", func() bool { return !f.p.Isolation().Isolated })
	if got := f.p.Health(f.name(0)); got != liveness.Down {
		t.Errorf("%s, tainted, is %v once its agent answers again, want down", f.name(0), got)
	}
}
