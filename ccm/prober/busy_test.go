package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"strconv"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// requireEcho skips the test where this process may open no ICMP socket: the busy rule
// then has no sign of life but late answers.
func requireEcho(t *testing.T) {
	t.Helper()
	e, err := liveness.OpenEchoer()
	if err != nil {
		t.Skipf("no ICMP socket (root, or net.ipv4.ping_group_range, is needed): %v", err)
	}
	e.Close()
}

// TestBusyAgentIsNotDown stops an agent's process, as a node whose cores are all taken
// does to an agent with a small CPU share, while its node's kernel answers: for less than
// the busy timeout nothing changes, and past it, the agent is down.
func TestBusyAgentIsNotDown(t *testing.T) {
	requireEcho(t)
	port, conn, _ := freezableAgent(t)
	const busyTimeout = time.Second
	cfg := config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port, BusyTimeout: busyTimeout}
	p, changes := startProberWith(t, cfg, testNode("node-a", "127.0.0.2"))
	if got := p.Health("node-a"); got != liveness.Up {
		t.Fatalf("node-a %v before it stops, want up", got)
	}
	drain(changes)
	echoes, _ := testutil.GetCounterMetricValue(echoReplies)
	late, _ := testutil.GetCounterMetricValue(lateAnswers)

	// Stopped for well over the failure threshold's time, and under the busy timeout.
	conn.running.Lock()
	eventually(t, time.Second, "the agent taken for busy", func() bool { v, _ := testutil.GetGaugeMetricValue(busyAgents); return v == 1 })
	time.Sleep(busyTimeout / 2)
	conn.running.Unlock()
	eventually(t, time.Second, "the agent not busy after it runs again", func() bool { v, _ := testutil.GetGaugeMetricValue(busyAgents); return v == 0 })
	select {
	case n := <-changes:
		t.Fatalf("%s changed to %v while its agent was stopped for %v, want no change", n, p.Health(n), busyTimeout/2)
	default:
	}
	if v, _ := testutil.GetCounterMetricValue(echoReplies); v <= echoes {
		t.Errorf("baremetal_ccm_agent_echo_replies_total %v, want more than %v", v, echoes)
	}
	if v, _ := testutil.GetCounterMetricValue(lateAnswers); v <= late {
		t.Errorf("baremetal_ccm_agent_probe_late_answers_total %v, want more than %v: the stopped agent answered when it ran again", v, late)
	}

	// Stopped for good: down once the busy timeout has passed since its last answer.
	answered := p.Agents()["node-a"].LastAnswer
	conn.running.Lock()
	defer conn.running.Unlock()
	waitState(t, p, changes, "node-a", liveness.Down, 3*busyTimeout)
	if took := time.Since(answered); took < busyTimeout || took > busyTimeout+500*time.Millisecond {
		t.Errorf("a stopped agent taken for down %v after its last answer, want the busy timeout, %v, and a few probes at most", took, busyTimeout)
	}
}

// TestGoneAgentIsDownAtOnce: an agent that is gone from a live node (its node answers
// echoes, and ICMP port unreachable for its port) is down after the failure threshold,
// as a dead node is, not after the busy timeout.
func TestGoneAgentIsDownAtOnce(t *testing.T) {
	requireEcho(t)
	port := agentPort(t)
	stop := respond(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	cfg := config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port, BusyTimeout: 10 * time.Second}
	p, changes := startProberWith(t, cfg, testNode("node-a", "127.0.0.2"))
	if got := p.Health("node-a"); got != liveness.Up {
		t.Fatalf("node-a %v before its agent goes, want up", got)
	}
	drain(changes)
	refusedBefore, _ := testutil.GetCounterMetricValue(unreachables)
	stop()
	gone := time.Now()
	waitState(t, p, changes, "node-a", liveness.Down, 5*time.Second)
	if took := time.Since(gone); took > 500*time.Millisecond {
		t.Errorf("an agent gone from a live node taken for down after %v, want well under a second", took)
	}
	// The first probe may have reached the socket before it closed, and gone with it.
	if v, _ := testutil.GetCounterMetricValue(unreachables); v < refusedBefore+2 {
		t.Errorf("baremetal_ccm_agent_probe_port_unreachable_total %v, want at least %v: one for each probe of the threshold after the first", v, refusedBefore+2)
	}
}
