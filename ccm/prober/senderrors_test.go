package prober

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/logs"
)

// matching returns the lines of log that contain s, each once: klog writes a line to
// the output of its severity and of each lower one, here the same.
func matching(log *logs.Buffer, s string) []string {
	var out []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, s) && !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return out
}

// captureLog has klog write to the returned buffer until the test ends.
func captureLog(t *testing.T) *logs.Buffer {
	log := &logs.Buffer{}
	klog.LogToStderr(false)
	klog.SetOutput(log)
	t.Cleanup(func() {
		klog.Flush()
		klog.LogToStderr(true)
	})
	return log
}

// TestSendErrorsLogged has the kernel refuse the probes of many agents at once, as a
// firewall on the ccm's host does (here: port 0): the first agent is logged at once, the
// others in one line that counts them, and the counter counts every refused probe.
func TestSendErrorsLogged(t *testing.T) {
	log := captureLog(t)
	const n = 30
	nodes := make([]runtime.Object, n)
	for i := range n {
		nodes[i] = testNode(fmt.Sprintf("node-%d", i), "127.0.0.1")
	}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(nodes...), 0)
	cfg := config.Failover{ProbeInterval: 100 * time.Millisecond, FailureThreshold: 3, AgentPort: 0}
	p := New(cfg, testKey, testSigner, factory.Core().V1().Nodes())
	refusedBefore := counter(probeSendErrors)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go p.Run(ctx)

	eventually(t, 5*time.Second, "a line that counts the other agents", func() bool {
		return len(matching(log, "Cannot send the probes of more agents")) > 0
	})
	first := matching(log, "Cannot send a probe to an agent")
	more := matching(log, "Cannot send the probes of more agents")
	if len(first) != 1 {
		t.Errorf("%d lines for single agents, want 1:\n%s", len(first), strings.Join(first, ""))
	}
	if len(more) != 1 || !strings.Contains(more[0], fmt.Sprintf("agents=%d", n-1)) {
		t.Errorf("lines that count agents %q, want one with agents=%d", more, n-1)
	}
	if refused := counter(probeSendErrors) - refusedBefore; refused < n {
		t.Errorf("baremetal_ccm_agent_probe_send_errors_total rose by %v, want %d at least", refused, n)
	}
}
