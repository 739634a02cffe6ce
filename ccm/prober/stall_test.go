package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// freezableConn is an agent's socket on a host that can stop: while running is locked, a
// probe request that arrives is read but handled only once the host runs again. Verdicts
// and duty lists pass: held, they would keep the requests behind them unread, unsignalled.
type freezableConn struct {
	net.PacketConn
	running sync.RWMutex
	// requests is signalled when a probe request is read while the host is stopped.
	requests chan struct{}
}

func (c *freezableConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.PacketConn.ReadFrom(b)
	// TryRLock fails as soon as the host starts stopping, so a request read in that
	// moment is held and signalled, never held in silence.
	if !c.running.TryRLock() {
		if err != nil || probe.IsVerdict(b[:n]) || probe.IsDuty(b[:n]) {
			return n, from, err
		}
		select {
		case c.requests <- struct{}{}:
		default:
		}
		c.running.RLock()
	}
	c.running.RUnlock()
	return n, from, err
}

// freezableAgent runs node-a's responder at 127.0.0.2 on a free port, on a socket the test
// can freeze that records the nonces of the requests it reads.
func freezableAgent(t *testing.T) (port int, conn *freezableConn, rec *recordingConn) {
	t.Helper()
	port = agentPort(t)
	pc, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	rec = &recordingConn{PacketConn: pc}
	conn = &freezableConn{PacketConn: rec, requests: make(chan struct{}, 1)}
	r, err := responder.New("node-a", testKey, testVerifier, testInterval, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Serve(conn) }() // nil once conn is closed; an error shows as requests unanswered
	return port, conn, rec
}

// recordingConn is an agent's socket that records the nonces of the requests it reads.
type recordingConn struct {
	net.PacketConn
	mu     sync.Mutex
	nonces []uint64
}

func (c *recordingConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.PacketConn.ReadFrom(b)
	if r, perr := testKey.ParseRequest(b[:n]); err == nil && perr == nil {
		c.mu.Lock()
		c.nonces = append(c.nonces, r.Nonce)
		c.mu.Unlock()
	}
	return n, from, err
}

// read returns the nonces recorded.
func (c *recordingConn) read() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nonces)
}

// TestStallIsNoMiss stops the prober and the agent together, as a saturated host or a
// paused virtual machine does, across the deadline of a probe out: the prober, running
// late on resuming, waits for the answer again instead of taking the agent for down, even
// with a failure threshold of one miss.
func TestStallIsNoMiss(t *testing.T) {
	port, conn, _ := freezableAgent(t)
	const interval = 200 * time.Millisecond // a timeout of 50 ms: room to freeze both in time
	cfg := config.Failover{ProbeInterval: interval, FailureThreshold: 1, AgentPort: port}
	p, changes := startProberWith(t, cfg, testNode("node-a", "127.0.0.2"))
	if got := p.Health("node-a"); got != liveness.Up {
		t.Fatalf("node-a %v before the stall, want up", got)
	}
	stallsBefore, _ := testutil.GetCounterMetricValue(proberStalls)
	drain(changes)

	// The agent stops first, just after an answer, so that the probe of its next turn is
	// a whole interval away: none can be read before the stop and answered late by a
	// responder a busy machine holds back. The prober stops as soon as that probe is out,
	// well before its deadline.
	answered := p.Agents()["node-a"].LastAnswer
	eventually(t, 2*interval, "an answer to start the stall after", func() bool {
		return p.Agents()["node-a"].LastAnswer.After(answered)
	})
	conn.running.Lock()
	select {
	case <-conn.requests:
	case <-time.After(2 * interval):
		conn.running.Unlock()
		t.Fatal("no probe arrived while the agent was stopped")
	}
	p.sched.mu.Lock()
	time.Sleep(3 * interval / 4) // the stall: three timeouts
	p.sched.mu.Unlock()
	resumed := time.Now()
	time.Sleep(5 * time.Millisecond) // the agent resumes a little later
	conn.running.Unlock()

	// The next probe comes half an interval after the one that waited, at the earliest:
	// its answer says that the prober has judged the one across the stall.
	eventually(t, 2*time.Second, "an answer to a probe sent after the stall", func() bool {
		return p.Agents()["node-a"].LastAnswer.After(resumed.Add(interval / 2))
	})
	select {
	case n := <-changes:
		t.Errorf("%s changed to %v across the stall, want no change", n, p.Health(n))
	default:
	}
	if got := p.Health("node-a"); got != liveness.Up {
		t.Errorf("node-a %v after the stall, want up", got)
	}
	if stalls, _ := testutil.GetCounterMetricValue(proberStalls); stalls <= stallsBefore {
		t.Errorf("baremetal_ccm_prober_stalls_total %v after the stall, want more than %v", stalls, stallsBefore)
	}
}
