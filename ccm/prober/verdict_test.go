package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// agentPort returns a UDP port free on 127.0.0.2, for every test agent to listen on.
func agentPort(t *testing.T) int {
	t.Helper()
	l, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.LocalAddr().(*net.UDPAddr).Port
}

// testNode is a Node whose agent is probed at ip.
func testNode(name, ip string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
}

// startProber runs a prober over nodes until the test ends, and returns it synced with
// the channel its OnChange feeds.
func startProber(t *testing.T, port int, nodes ...runtime.Object) (*Prober, chan string) {
	t.Helper()
	return startProberWith(t, config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port}, nodes...)
}

// startProberWith is startProber with the failover settings cfg.
func startProberWith(t *testing.T, cfg config.Failover, nodes ...runtime.Object) (*Prober, chan string) {
	t.Helper()
	return startProberSetUp(t, cfg, func(*Prober) {}, nodes...)
}

// startProberSetUp is startProberWith with setUp called before Run.
func startProberSetUp(t *testing.T, cfg config.Failover, setUp func(*Prober), nodes ...runtime.Object) (*Prober, chan string) {
	t.Helper()
	p, changes, _ := startProberClient(t, cfg, setUp, nodes...)
	return p, changes
}

// startProberClient is startProberSetUp that also returns the client of its Nodes, for a
// test to change them.
func startProberClient(t *testing.T, cfg config.Failover, setUp func(*Prober), nodes ...runtime.Object) (*Prober, chan string, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(nodes...)
	factory := informers.NewSharedInformerFactory(client, 0)
	p := New(cfg, testKey, testSigner, factory.Core().V1().Nodes())
	setUp(p)
	changes := make(chan string, 1000)
	p.OnChange(func(node string) { changes <- node })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go p.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("prober never synced")
	}
	return p, changes, client
}

// eventually polls cond until it holds, failing the test after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}

// holds reports whether r took verdict v, and v is the prober's latest.
func holds(p *Prober, r *responder.Responder, down ...string) bool {
	v := p.Verdict()
	return v.Seq > 0 && slices.Equal(v.Down, down) && r.Verdict().VerdictRef == v.VerdictRef && slices.Equal(r.Verdict().Down, down)
}

// TestVerdictNamesAStoppedAgent checks that the agents learn from the ccm, not from the
// API, that an agent stopped answering: its standbys act on that verdict.
func TestVerdictNamesAStoppedAgent(t *testing.T) {
	port := agentPort(t)
	rA, stopA := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	rB, _ := startResponder(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))

	eventually(t, 2*time.Second, "both agents hold a first verdict naming no one", func() bool { return holds(p, rA) && holds(p, rB) })
	if rA.LastCCM().IsZero() || rB.LastCCM().IsZero() {
		t.Error("the ccm's requests are no sign of its life to the agents")
	}
	first := rB.Verdict().Seq

	drain(changes)
	stopA()
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	eventually(t, time.Second, "node-b holds a verdict naming node-a", func() bool { return holds(p, rB, "node-a") })
	if got := rB.Verdict().Seq; got <= first {
		t.Errorf("verdict naming node-a has seq %d, want more than %d", got, first)
	}

	// It comes back: out of the verdict once up again.
	respond(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	eventually(t, time.Second, "node-b holds a verdict naming no one", func() bool { return holds(p, rB) })
}

// TestVerdictIsSentAtOnce checks that a changed verdict goes to every agent when it
// changes, not only in answer to a reply that shows an older one: the agent here never
// replies, so only the prober's own sending can bring it the verdicts.
func TestVerdictIsSentAtOnce(t *testing.T) {
	port := agentPort(t)
	_, stopA := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	mute, err := net.ListenPacket("udp", "127.0.0.3:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	verdicts := make(chan probe.Verdict, 100)
	go func() {
		b := make([]byte, probe.MaxDatagram)
		for {
			n, _, err := mute.ReadFrom(b)
			if err != nil {
				return
			}
			if v, err := testKey.ParseVerdict(testVerifier, b[:n]); err == nil {
				verdicts <- v.Verdict
			}
		}
	}()
	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	drain(changes)
	stopA()
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	deadline := time.After(2 * time.Second)
	for {
		select {
		case v := <-verdicts:
			if slices.Equal(v.Down, []string{"node-a", "node-b"}) && v.VerdictRef == p.Verdict().VerdictRef {
				return
			}
		case <-deadline:
			t.Fatalf("the mute agent never got the verdict %+v", p.Verdict())
		}
	}
}

// slowConn is an agent's socket whose replies leave delay late, as from a loaded node or
// across a long path: many probes are out when a verdict goes out.
type slowConn struct {
	net.PacketConn
	delay time.Duration
}

func (c *slowConn) WriteTo(b []byte, to net.Addr) (int, error) {
	time.Sleep(c.delay)
	return c.PacketConn.WriteTo(b, to)
}

// lossyConn is an agent's socket that loses the verdict datagrams arriving while drop is
// set.
type lossyConn struct {
	net.PacketConn
	drop    atomic.Bool
	dropped atomic.Int64
}

func (c *lossyConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(b)
		if err != nil || !c.drop.Load() || !probe.IsVerdict(b[:n]) {
			return n, from, err
		}
		c.dropped.Add(1)
	}
}

// TestVerdictGoesOnceToEachAgent checks that a changed verdict reaches each agent once: a
// reply to a probe sent before the verdict went out holds the older verdict, and sending
// the verdict again for it would double what every agent checks, and what the ccm sends,
// at each change — at thousands of agents, in the burst that follows a node's death.
func TestVerdictGoesOnceToEachAgent(t *testing.T) {
	port := agentPort(t)
	const n = 12
	var nodes []runtime.Object
	responders := make([]*responder.Responder, n)
	stops := make([]func(), n)
	for i := range n {
		name, ip := fmt.Sprintf("node-%d", i), fmt.Sprintf("127.0.0.%d", i+2)
		// 8 ms of startProber's 50 ms interval with a probe out, within its 12.5 ms
		// timeout: some probes are out at each change.
		responders[i], stops[i] = responderOn(t, name, ip+":"+strconv.Itoa(port), func(c net.PacketConn) net.PacketConn {
			return &slowConn{PacketConn: c, delay: 8 * time.Millisecond}
		})
		nodes = append(nodes, testNode(name, ip))
	}
	p, changes := startProber(t, port, nodes...)
	drain(changes)
	// The first verdict may come before an agent follows this ccm, and come again.
	first := p.Verdict()
	eventually(t, 2*time.Second, "every agent holds the first verdict", func() bool {
		for _, r := range responders {
			if r.Verdict().VerdictRef != first.VerdictRef {
				return false
			}
		}
		return true
	})
	stale := make([]uint64, n)
	for i, r := range responders {
		stale[i] = r.Stats().StaleVerdicts
	}
	for _, stopped := range []int{0, 1} {
		stops[stopped]()
		waitState(t, p, changes, fmt.Sprintf("node-%d", stopped), liveness.Down, 2*time.Second)
		want := p.Verdict()
		eventually(t, 2*time.Second, "every live agent holds the verdict", func() bool {
			for _, r := range responders[stopped+1:] {
				if r.Verdict().VerdictRef != want.VerdictRef {
					return false
				}
			}
			return true
		})
		// Each live agent answers two probes more: a verdict sent again would have come.
		requests := make([]uint64, n)
		for i, r := range responders {
			requests[i] = r.Stats().Requests
		}
		eventually(t, 2*time.Second, "two more probes answered by each live agent", func() bool {
			for i, r := range responders[stopped+1:] {
				if r.Stats().Requests < requests[stopped+1+i]+2 {
					return false
				}
			}
			return true
		})
	}
	for i, r := range responders[2:] {
		if st := r.Stats(); st.StaleVerdicts != stale[i+2] || st.Verdicts != 3 {
			t.Errorf("node-%d took %d verdicts and was sent %d it held already, want 3 (the first, and one per agent stopped) and none", i+2, st.Verdicts, st.StaleVerdicts-stale[i+2])
		}
	}
}

// TestLostVerdictIsSentAgain checks that an agent that lost a verdict's broadcast gets it
// with the reply to its next probe.
func TestLostVerdictIsSentAgain(t *testing.T) {
	port := agentPort(t)
	_, stopA := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	var lossy *lossyConn
	b, _ := responderOn(t, "node-b", "127.0.0.3:"+strconv.Itoa(port), func(c net.PacketConn) net.PacketConn {
		lossy = &lossyConn{PacketConn: c}
		return lossy
	})
	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	drain(changes)
	lossy.drop.Store(true)
	stopA()
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	eventually(t, time.Second, "the broadcast lost", func() bool { return lossy.dropped.Load() > 0 })
	lossy.drop.Store(false)
	eventually(t, 2*time.Second, "node-b holds the verdict", func() bool {
		return b.Verdict().VerdictRef == p.Verdict().VerdictRef && slices.Contains(b.Verdict().Down, "node-a")
	})
}

// TestReplacedAgent checks an agent the announcer moved addresses away from while it was
// down: while the annotations still name it, it answers but is Replaced, and in the
// verdict, so that it takes nothing back. What an agent says it covers is only shown.
func TestReplacedAgent(t *testing.T) {
	port := agentPort(t)
	// node-a's agent reports no cache version until the test sets one.
	var version atomic.Uint64
	rA, stopA := responderWith(t, "node-a", "127.0.0.2:"+strconv.Itoa(port), nil, version.Load)
	rB, _ := startResponder(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	eventually(t, 2*time.Second, "a first verdict naming no one", func() bool { return holds(p, rB) })
	first := p.Verdict()

	rB.SetCovers([]string{"node-a"})
	eventually(t, 2*time.Second, "node-b's covers shown", func() bool { return slices.Equal(p.Agents()["node-b"].Covers, []string{"node-a"}) })
	if got, v := p.Health("node-a"), p.Verdict(); got != liveness.Up || v.VerdictRef != first.VerdictRef {
		t.Errorf("an agent's word that it covers node-a made node-a %v, verdict %+v", got, v)
	}

	drain(changes)
	p.SetReplaced(map[string]uint64{"node-a": Held})
	if got := p.Health("node-a"); got != liveness.Replaced {
		t.Errorf("node-a is %v after SetReplaced, want replaced", got)
	}
	waitState(t, p, changes, "node-a", liveness.Replaced, time.Second)
	eventually(t, time.Second, "node-a holds a verdict naming itself", func() bool { return holds(p, rA, "node-a") })
	if got := p.Health("node-b"); got != liveness.Up {
		t.Errorf("node-b is %v, want up", got)
	}

	// Released at version 42: replaced until node-a's cache has reached it.
	version.Store(41)
	p.SetReplaced(map[string]uint64{"node-a": 42})
	eventually(t, time.Second, "node-a's cache version seen", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.agents["node-a"].cacheVersion == 41 })
	if got := p.Health("node-a"); got != liveness.Replaced {
		t.Errorf("node-a is %v with its cache at 41 of 42, want replaced", got)
	}
	version.Store(42)
	waitState(t, p, changes, "node-a", liveness.Up, time.Second)
	eventually(t, time.Second, "node-b holds a verdict naming no one", func() bool { return holds(p, rB) })
	if got := p.Verdict().Seq; got <= first.Seq+1 {
		t.Errorf("verdict seq %d after two changes from %d", got, first.Seq)
	}

	// Replaced is for an agent that answers: replaced and not answering, it is down.
	p.SetReplaced(map[string]uint64{"node-a": Held})
	stopA()
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	if v := p.Verdict(); !slices.Equal(v.Down, []string{"node-a"}) {
		t.Errorf("verdict %+v, want node-a down", v)
	}
}

// TestAdoptedAgent checks an agent that stood down while another stood in for it, as
// while no ccm was heard: only when both say so is it Replaced, and in the verdict, so
// that neither an agent cut off nor one standing down alone moves anything.
func TestAdoptedAgent(t *testing.T) {
	port := agentPort(t)
	rA, _ := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	rB, _ := startResponder(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	eventually(t, 2*time.Second, "a first verdict naming no one", func() bool { return holds(p, rB) })

	drain(changes)
	rA.SetStandsDown(true)
	// The prober tells of node-a once its reply says it stands down: alone, that is no
	// reason to take it for replaced.
	waitChange(t, changes, "node-a", 2*time.Second)
	if got := p.Health("node-a"); got != liveness.Up {
		t.Errorf("node-a standing down on its own is %v, want up", got)
	}
	rB.SetCovers([]string{"node-a"})
	waitState(t, p, changes, "node-a", liveness.Replaced, 2*time.Second)
	if got := p.CoveredBy("node-a"); !slices.Equal(got, []string{"node-b"}) {
		t.Errorf("CoveredBy(node-a) = %v, want node-b", got)
	}
	eventually(t, time.Second, "node-b holds a verdict naming node-a", func() bool { return holds(p, rB, "node-a") })

	rB.SetCovers(nil)
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	eventually(t, time.Second, "node-a holds a verdict naming no one", func() bool { return holds(p, rA) })
	if got := p.CoveredBy("node-a"); len(got) != 0 {
		t.Errorf("CoveredBy(node-a) = %v, want none", got)
	}
}

// waitChange waits until the prober tells of a change of node.
func waitChange(t *testing.T, changes chan string, node string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case n := <-changes:
			if n == node {
				return
			}
		case <-deadline:
			t.Fatalf("no change of %s within %v", node, within)
		}
	}
}

// TestExpediteProbesAtOnce: an agent whose duty changed is probed at once, not in its
// next slot, which after an answered probe is at least half an interval away.
func TestExpediteProbesAtOnce(t *testing.T) {
	port := agentPort(t)
	r, _ := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	const interval = time.Second
	p, changes := startProberWith(t, config.Failover{ProbeInterval: interval, FailureThreshold: 3, AgentPort: port}, testNode("node-a", "127.0.0.2"))
	waitState(t, p, changes, "node-a", liveness.Up, 5*time.Second)
	n := r.Stats().Requests
	eventually(t, 3*interval, "a probe answered", func() bool { return r.Stats().Requests > n })
	n = r.Stats().Requests
	asked := time.Now()
	p.Expedite([]string{"node-a", "node-unknown"})
	eventually(t, 3*interval, "another probe answered", func() bool { return r.Stats().Requests > n })
	if took := time.Since(asked); took > interval/4 {
		t.Errorf("the next probe came %v after Expedite, want at once: before its slot, at least %v after the last", took, interval/2)
	}
}
