package e2e

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// idleWindow is how long BenchmarkAgentIdle measures the agents at rest.
const idleWindow = 30 * time.Second

// BenchmarkAgentIdle reports what an agent costs at rest: three nodes, the ccm probing
// their agents at the default rate, one dual-stack Service announced by one of them,
// nothing changing. Every agent's CPU time over idleWindow, in milliseconds of CPU a
// second (millicores): what the agent's 20m CPU request must cover, with room for a
// burst, on a node whose pods keep every core busy. Run it with -benchtime=1x (make
// bench-idle).
func BenchmarkAgentIdle(b *testing.B) {
	for b.Loop() {
		c := newCluster(b, 3)
		c.startCCM(b)
		svc, _ := c.createLBService(b, "idle")
		c.waitSettled(b)
		announcer := c.announcer(b, svc)
		// The first seconds after the settle still hold the last writes' echoes.
		time.Sleep(5 * time.Second)
		before := map[string]time.Duration{}
		for _, h := range c.Net.Nodes {
			before[h.Label] = c.agentCPU(b, h.Label)
		}
		start := time.Now()
		time.Sleep(idleWindow) // the window measured: nothing happens in it, on purpose
		elapsed := time.Since(start)
		var rates []float64
		fmt.Fprintf(os.Stdout, "\nagents at rest, %v: CPU in millicores (ms of CPU a second)\n", idleWindow)
		for _, h := range c.Net.Nodes {
			rate := float64(c.agentCPU(b, h.Label)-before[h.Label]) / float64(elapsed) * 1000
			rates = append(rates, rate)
			role := "standby"
			if h.Label == announcer {
				role = "announcer"
			}
			fmt.Fprintf(os.Stdout, "  %s (%s): %.1f\n", h.Label, role, rate)
		}
		b.ReportMetric(slices.Max(rates), "max-agent-millicores")
	}
}

// agentCPU returns the CPU time node's agent has used so far.
func (c *cluster) agentCPU(t testing.TB, node string) time.Duration {
	t.Helper()
	d, err := process.CPUTime(c.Agent(node).Pid())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
