package peers

import (
	"context"
	"crypto/ed25519"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

const interval = 50 * time.Millisecond

var (
	testKey, _ = probe.ParseKey([]byte("pqN1yG3lO2xZ0cB7v8W4eR6tY9uI5oP1aS3dF7gH2jK=\n"))
	testSigner = probe.NewSigner(ed25519.NewKeyFromSeed([]byte("the ccm's key for the peer tests!")[:ed25519.SeedSize]))
)

// freePort returns a UDP port free on 127.0.0.2.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.LocalAddr().(*net.UDPAddr).Port
}

func testNode(name, ip string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
}

// serve runs a real responder for node at addr until the test ends or stop is called.
func serve(t *testing.T, node, addr string) (r *responder.Responder, stop func()) {
	t.Helper()
	return serveOn(t, node, addr, nil)
}

// serveOn is serve, the responder reading through wrap if not nil.
func serveOn(t *testing.T, node, addr string, wrap func(net.PacketConn) net.PacketConn) (r *responder.Responder, stop func()) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r, err = responder.New(node, testKey, testSigner.Verifier(), interval, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc
	if wrap != nil {
		conn = wrap(pc)
	}
	go func() { _ = r.Serve(conn) }()
	t.Cleanup(func() { pc.Close() })
	return r, func() { pc.Close() }
}

// start runs a prober of the targets among nodes until the test ends, and returns it
// with the changes it tells of.
func start(t *testing.T, port int, targets map[string]bool, nodes ...runtime.Object) (*Prober, chan string) {
	t.Helper()
	return startWith(t, config.Failover{ProbeInterval: interval, FailureThreshold: 3, AgentPort: port}, targets, nodes...)
}

// startWith is start with cfg.
func startWith(t *testing.T, cfg config.Failover, targets map[string]bool, nodes ...runtime.Object) (*Prober, chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(fake.NewSimpleClientset(nodes...), 0)
	p := New(cfg, testKey, factory.Core().V1().Nodes())
	changes := make(chan string, 1000)
	p.OnChange(func(n string) { changes <- n })
	p.SetTargets(targets)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go p.Run(ctx)
	return p, changes
}

// waitState waits until the prober tells of node in state want.
func waitState(t *testing.T, p *Prober, changes chan string, node string, want liveness.State, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case n := <-changes:
			if n == node && p.Health(node) == want {
				return
			}
		case <-deadline:
			t.Fatalf("%s is %v after %v, want %v", node, p.Health(node), within, want)
		}
	}
}

// TestPeerUpThenDown checks a peer's agent taken for up at its first answer, and for down
// once it stopped answering and its node refuses the probes (port unreachable), within
// the failure threshold's rapid probes.
func TestPeerUpThenDown(t *testing.T) {
	port := freePort(t)
	_, stop := serve(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	p, changes := start(t, port, map[string]bool{"node-a": true}, testNode("node-a", "127.0.0.2"))
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	if a := p.Agents()["node-a"]; a.LastAnswer.IsZero() || a.Address.Port() != uint16(port) {
		t.Errorf("Agents()[node-a] = %+v, want an answer at port %d", a, port)
	}
	stop()
	stopped := time.Now()
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	// The next probe within an interval, then the threshold's refusals at once: a dead
	// node's misses would take the answer's time each.
	if took := time.Since(stopped); took > 3*interval {
		t.Errorf("down %v after the agent stopped, want within %v: refusals and rapid probes", took, 3*interval)
	}
}

// TestPeerProbedAtOnce: a peer is probed at once, not at its place in the cycle, here
// late in the interval: it is probed because no ccm is heard.
func TestPeerProbedAtOnce(t *testing.T) {
	node := ""
	for i := 0; node == ""; i++ {
		if n := "peer-" + strconv.Itoa(i); cycle.Phase(n, interval) >= 4*interval/5 {
			node = n
		}
	}
	port := freePort(t)
	r, _ := serve(t, node, "127.0.0.2:"+strconv.Itoa(port))
	began := time.Now()
	p, changes := start(t, port, map[string]bool{node: true}, testNode(node, "127.0.0.2"))
	waitState(t, p, changes, node, liveness.Up, time.Second)
	if took := time.Since(began); took >= cycle.Phase(node, interval)/2 {
		t.Errorf("up %v after the start, want at once, not at its phase %v", took, cycle.Phase(node, interval))
	}
	if st := r.Stats(); st.Requests == 0 {
		t.Errorf("no request taken: %+v", st)
	}
}

// TestPeersAreNoCCM checks that only the targets are probed, that the probes are no sign
// of a ccm's life to the peers, and that what a peer says it stands in for is told.
func TestPeersAreNoCCM(t *testing.T) {
	port := freePort(t)
	rA, _ := serve(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	rB, _ := serve(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	p, changes := start(t, port, map[string]bool{"node-a": true}, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	if _, ok := p.Agents()["node-b"]; ok || rB.Stats().Requests != 0 {
		t.Errorf("node-b, not a target, is probed (%d requests)", rB.Stats().Requests)
	}
	if got := rA.LastCCM(); !got.IsZero() {
		t.Errorf("a peer's probes made the agent hear a ccm at %v", got)
	}
	rA.SetCovers([]string{"node-x"})
	deadline := time.After(2 * time.Second)
	for !slices.Equal(p.CoveredBy("node-x"), []string{"node-a"}) {
		select {
		case <-changes:
		case <-deadline:
			t.Fatalf("CoveredBy(node-x) = %v, want node-a", p.CoveredBy("node-x"))
		}
	}
	if got := p.Health("node-x"); got != liveness.Down {
		t.Errorf("node-x, no node of the cluster, is %v", got)
	}

	p.SetTargets(map[string]bool{"node-b": true})
	waitState(t, p, changes, "node-b", liveness.Up, 2*time.Second)
	if _, ok := p.Agents()["node-a"]; ok {
		t.Error("node-a, no longer a target, is still probed")
	}
	p.SetTargets(map[string]bool{})
	if got := p.Agents(); len(got) != 0 {
		t.Errorf("with no targets, probing %v", got)
	}
}

// frozenConn reads only while running is not held: an agent process stopped, as one
// starved of CPU is, on a node whose kernel still answers.
type frozenConn struct {
	net.PacketConn
	running sync.Mutex
}

func (c *frozenConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.PacketConn.ReadFrom(b)
	c.running.Lock()
	c.running.Unlock() //nolint:staticcheck // a gate: wait until the agent runs
	return n, from, err
}

// TestBusyPeerIsNotDown stops a peer's agent while its node's kernel answers the echoes
// that go with the probes it misses: for less than the busy timeout nothing changes, and
// past it, the peer is down.
func TestBusyPeerIsNotDown(t *testing.T) {
	e, err := liveness.OpenEchoer()
	if err != nil {
		t.Skipf("no ICMP socket (root, or net.ipv4.ping_group_range, is needed): %v", err)
	}
	e.Close()
	port := freePort(t)
	conn := &frozenConn{}
	serveOn(t, "node-a", "127.0.0.2:"+strconv.Itoa(port), func(pc net.PacketConn) net.PacketConn { conn.PacketConn = pc; return conn })
	const busyTimeout = time.Second
	cfg := config.Failover{ProbeInterval: interval, FailureThreshold: 3, AgentPort: port, BusyTimeout: busyTimeout}
	p, changes := startWith(t, cfg, map[string]bool{"node-a": true}, testNode("node-a", "127.0.0.2"))
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)

	// Stopped for many times the failure threshold's time, and under the busy timeout.
	conn.running.Lock()
	time.Sleep(busyTimeout / 2)
	resumed := time.Now()
	conn.running.Unlock()
	// Down, it would need three answers in a row to be up again: one answer shows it.
	for deadline := time.Now().Add(time.Second); !p.Agents()["node-a"].LastAnswer.After(resumed); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no answer within a second of the agent running again")
		}
	}
	if got := p.Health("node-a"); got != liveness.Up {
		t.Fatalf("node-a %v after its agent was stopped for %v, want up: busy, not down", got, busyTimeout/2)
	}

	// Stopped for good: down once the busy timeout has passed since its last answer.
	conn.running.Lock()
	defer conn.running.Unlock()
	last := p.Agents()["node-a"].LastAnswer
	waitState(t, p, changes, "node-a", liveness.Down, 3*busyTimeout)
	if took := time.Since(last); took < busyTimeout || took > busyTimeout+500*time.Millisecond {
		t.Errorf("a stopped peer taken for down %v after its last answer, want the busy timeout, %v, and a few probes at most", took, busyTimeout)
	}
}

// TestPeerTakesOnlyItsAnswers has a peer answer its first request, then only send back,
// for every later request, what anyone on the path could: that first reply replayed, a
// reply made with another key, one naming another node, and an oversized datagram. None
// is an answer: the peer is down at the failure threshold, as a silent one is.
func TestPeerTakesOnlyItsAnswers(t *testing.T) {
	port := freePort(t)
	conn, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	other, _ := probe.ParseKey([]byte("another key, of the same length: 0123456789\n"))
	go func() {
		buf := make([]byte, probe.MaxDatagram)
		var first []byte
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			req, err := testKey.ParseRequest(buf[:n])
			if err != nil {
				continue
			}
			if first == nil {
				first, _ = testKey.AppendReply(nil, probe.Reply{Nonce: req.Nonce, Node: "node-a", State: probe.Ready})
				_, _ = conn.WriteTo(first, from)
				continue
			}
			forged, _ := other.AppendReply(nil, probe.Reply{Nonce: req.Nonce, Node: "node-a", State: probe.Ready})
			misnamed, _ := testKey.AppendReply(nil, probe.Reply{Nonce: req.Nonce, Node: "node-b", State: probe.Ready})
			for _, b := range [][]byte{first, forged, misnamed, make([]byte, 60000)} {
				_, _ = conn.WriteTo(b, from)
			}
		}
	}()
	p, changes := start(t, port, map[string]bool{"node-a": true}, testNode("node-a", "127.0.0.2"))
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	answered := p.Agents()["node-a"].LastAnswer
	waitState(t, p, changes, "node-a", liveness.Down, 2*time.Second)
	if got := p.Agents()["node-a"].LastAnswer; !got.Equal(answered) {
		t.Errorf("last answer %v, want the first one's %v: nothing after it was an answer", got, answered)
	}
}
