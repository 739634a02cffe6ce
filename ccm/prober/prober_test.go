package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"context"
	"crypto/ed25519"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// respond runs a real health responder for node on addr until the test ends or stop is
// called.
func respond(t *testing.T, node, addr string) (stop func()) {
	t.Helper()
	_, stop = startResponder(t, node, addr)
	return stop
}

// startResponder runs a real health responder for node on addr until the test ends or stop is
// called, and returns it.
func startResponder(t *testing.T, node, addr string) (r *responder.Responder, stop func()) {
	t.Helper()
	return responderOn(t, node, addr, nil)
}

// responderOn is startResponder with its socket wrapped by wrap, if not nil: a network
// that loses or delays.
func responderOn(t *testing.T, node, addr string, wrap func(net.PacketConn) net.PacketConn) (r *responder.Responder, stop func()) {
	t.Helper()
	return responderWith(t, node, addr, wrap, nil)
}

// responderWith is responderOn whose replies carry the Service cache version
// cacheVersion returns, if not nil.
func responderWith(t *testing.T, node, addr string, wrap func(net.PacketConn) net.PacketConn, cacheVersion func() uint64) (r *responder.Responder, stop func()) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc
	if wrap != nil {
		conn = wrap(pc)
	}
	r, err = responder.New(node, testKey, testVerifier, testInterval, cacheVersion)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Serve(conn) }() // nil once conn is closed; an error shows as requests unanswered
	var once sync.Once
	stop = func() { once.Do(func() { pc.Close() }) }
	t.Cleanup(stop)
	return r, stop
}

func TestProber(t *testing.T) {
	// Two nodes on two loopback addresses with the same agent port, as on a cluster.
	l, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	node := func(name, ip string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
	}
	client := fake.NewClientset(node("node-a", "127.0.0.2"), node("node-b", "127.0.0.3"), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "no-address"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port}
	p := New(cfg, testKey, testSigner, factory.Core().V1().Nodes())
	changes := make(chan string, 100)
	p.OnChange(func(node string) { changes <- node })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	stopA := respond(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	go p.Run(ctx)
	// node-b answers nothing: its port is closed, so the first verdict comes after its
	// turn, a timeout and two rapid probes.
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("prober never synced")
	}
	t.Logf("synced after %v", time.Since(start))
	if got := p.Health("node-a"); got != liveness.Up {
		t.Errorf("node-a %v, want up", got)
	}
	if got := p.Health("node-b"); got != liveness.Down {
		t.Errorf("node-b %v, want down", got)
	}
	if got := p.Health("no-address"); got != liveness.Down {
		t.Errorf("node without address %v, want down", got)
	}
	// What the status page shows of each: where it is probed, and the last round trip.
	probed := p.Agents()
	if a := probed["node-a"]; a.Address.String() != "127.0.0.2:"+strconv.Itoa(port) || a.LastRTT <= 0 || a.LastAnswer.IsZero() {
		t.Errorf("node-a probed %+v, want its address, an RTT and the time of the answer", a)
	}
	if b := probed["node-b"]; b.Address.String() != "127.0.0.3:"+strconv.Itoa(port) || b.LastRTT != 0 || !b.LastAnswer.IsZero() {
		t.Errorf("node-b probed %+v, want its address and no answer", b)
	}
	if _, ok := probed["no-address"]; ok {
		t.Error("a node without an address is probed")
	}

	// node-a's agent dies: down within an interval, a timeout and two rapid probes.
	drain(changes)
	stopA()
	died := time.Now()
	waitState(t, p, changes, "node-a", liveness.Down, time.Second)
	t.Logf("node-a down %v after its agent stopped", time.Since(died))

	// It comes back: up only after three answers in a row.
	respond(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	back := time.Now()
	waitState(t, p, changes, "node-a", liveness.Up, 2*time.Second)
	if took := time.Since(back); took < 2*cfg.ProbeInterval {
		t.Errorf("node-a up %v after its agent came back: too soon for three answers %v apart", took, cfg.ProbeInterval)
	}
}

func drain(ch chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

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

// testInterval is the probe interval the tests' responders expect: the default.
const testInterval = 100 * time.Millisecond

// testKey is the probe key of the agents and the prober of these tests.
var testKey = func() *probe.Key {
	k, err := probe.ParseKey([]byte("a probe key for the prober's tests, long enough\n"))
	if err != nil {
		panic(err)
	}
	return k
}()

// testSigner signs the verdicts and duties of the ccm's prober in these tests, and
// testVerifier is what the agents check them with.
var (
	testSigner   = probe.NewSigner(ed25519.NewKeyFromSeed([]byte("the ccm's verdict key for tests!")))
	testVerifier = testSigner.Verifier()
)

// TestProberTakesOnlyAuthenticatedReplies checks that answers not made with the key (by
// someone answering in an agent's place, or an agent with another key) count for nothing:
// a forged answer never keeps a node up.
func TestProberTakesOnlyAuthenticatedReplies(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	other, err := probe.ParseKey([]byte("not the prober's key, though long enough\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The impostor answers every request at once, with the request's nonce, ready, but
	// with a key of its own.
	impostor := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.2"}}}}
	conn, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		b := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(b)
			if err != nil {
				return
			}
			if n >= 12 {
				reply, _ := other.AppendReply(nil, probe.Reply{Nonce: binary.BigEndian.Uint64(b[4:12]), State: probe.Ready, Node: "node-a"})
				_, _ = conn.WriteTo(reply, from) // a failure shows in the counts the test checks
			}
		}
	}()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(impostor), 0)
	p := New(config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port}, testKey, testSigner, factory.Core().V1().Nodes())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	before, _ := testutil.GetCounterMetricValue(unauthenticatedReplies)
	go p.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("prober never synced")
	}
	if got := p.Health("node-a"); got != liveness.Down {
		t.Errorf("an agent whose answers are forged is %v, want down", got)
	}
	if after, _ := testutil.GetCounterMetricValue(unauthenticatedReplies); after-before < 3 {
		n := after - before
		t.Errorf("%v unauthenticated replies counted, want at least the 3 misses", n)
	}
}

// TestAgentWithAnotherKeyRefuses checks that a real agent with another probe key than the
// ccm's is not only taken for down but says why: its refusal reaches the ccm's prober,
// which counts it. The agent refuses at most once a second, and a refusal that arrives
// after its probe's deadline (a busy machine) is not counted: three seconds leave room for
// the next two.
func TestAgentWithAnotherKeyRefuses(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	other, err := probe.ParseKey([]byte("not the prober's key, though long enough\n"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	agent, err := responder.New("node-a", other, testVerifier, testInterval, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = agent.Serve(conn) }() // nil once conn is closed; an error shows as requests unanswered
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.2"}}}}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(node), 0)
	p := New(config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: port}, testKey, testSigner, factory.Core().V1().Nodes())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	before, _ := testutil.GetCounterMetricValue(refusals)
	go p.Run(ctx)
	deadline := time.Now().Add(3 * time.Second)
	for got, _ := testutil.GetCounterMetricValue(refusals); got == before; got, _ = testutil.GetCounterMetricValue(refusals) {
		if time.Now().After(deadline) {
			t.Fatal("no refusal of the agent with another key counted within 3 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("prober never synced")
	}
	if got := p.Health("node-a"); got != liveness.Down {
		t.Errorf("an agent with another key is %v, want down", got)
	}
	if st := agent.Stats(); st.Unauthenticated == 0 || st.Replies != 0 {
		t.Errorf("agent Stats = %+v, want unauthenticated requests and no replies", st)
	}
}
