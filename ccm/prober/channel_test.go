package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// The signs of life a busy agent shows (echo replies, late answers, port unreachable)
// come from the network, and anyone on it may send them. These tests forge, replay and
// reorder them: none keeps a dead agent up, nor takes a live one down. None of them
// carries a time either: the prober orders and times everything by its own monotonic
// clock, so a node's clock, right or wrong, has no say.

// frozenAgent runs node-a's responder on a socket the test can freeze (freezableAgent),
// and a ccm's prober of it with cfg (AgentPort set here), whose echo sockets are closed: on
// loopback the kernel answers every echo, and these tests send the only ones.
func frozenAgent(t *testing.T, cfg config.Failover) (*Prober, *sched, *freezableConn, *recordingConn, chan string) {
	t.Helper()
	port, conn, rec := freezableAgent(t)
	cfg.AgentPort = port
	p, changes := startProberWith(t, cfg, testNode("node-a", "127.0.0.2"))
	if got := p.Health("node-a"); got != liveness.Up {
		t.Fatalf("node-a %v at the start, want up", got)
	}
	p.mu.Lock()
	s := p.sched
	p.mu.Unlock()
	if s.echo != nil {
		s.echo.Close()
	}
	drain(changes)
	return p, s, conn, rec, changes
}

// proberAddr returns the loopback address of the prober's socket i.
func (s *sched) proberAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.conns[i].LocalAddr().(*net.UDPAddr).AddrPort().Port())
}

// noncesForTest returns the nonces of the probes out, and of the missed ones a late answer may
// still match.
func (s *sched) noncesForTest() (out, late []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.pending {
		out = append(out, n)
	}
	for n := range s.late {
		late = append(late, n)
	}
	return out, late
}

// TestForgedSignsOfLife freezes an agent, as a dead one, while a forger sends every sign
// of life it can make without the key and the request in hand: echo replies for a probe
// out from another address, echo replies with a wrong nonce, and, from the node's
// address, the nonces of probes answered before (replays); answers made with another
// key, answers to the agent's missed probes that name another node, and the agent's own
// answers of before, again. The agent is down after the failure threshold, as with no
// forger, not after the busy timeout, and no forgery counts.
func TestForgedSignsOfLife(t *testing.T) {
	const interval = 50 * time.Millisecond
	cfg := config.Failover{ProbeInterval: interval, FailureThreshold: 3, BusyTimeout: 10 * time.Second}
	p, s, conn, rec, changes := frozenAgent(t, cfg)
	other, err := probe.ParseKey([]byte("not the cluster's probe key, and long enough\n"))
	if err != nil {
		t.Fatal(err)
	}
	to := s.proberAddr(socketOf("node-a", len(s.conns)))
	forger, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forger.Close() })

	// The agent's answers of before: what an attacker who recorded them holds.
	eventually(t, time.Second, "a few answered probes", func() bool { return len(rec.read()) >= 5 })
	echoes, _ := testutil.GetCounterMetricValue(echoReplies)
	late, _ := testutil.GetCounterMetricValue(lateAnswers)

	conn.running.Lock()
	defer conn.running.Unlock()
	frozen := time.Now()
	answered := rec.read()
	answered = answered[max(0, len(answered)-5):] // enough to replay, few enough not to flood
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		node, wrong := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.9")
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			out, missed := s.noncesForTest()
			for _, n := range out {
				s.echoed(wrong, n)
				s.echoed(node, n^1)
			}
			for _, n := range answered {
				s.echoed(node, n)
				b, _ := testKey.AppendReply(nil, probe.Reply{Nonce: n, Node: "node-a", State: probe.Ready})
				_, _ = forger.WriteToUDPAddrPort(b, to)
			}
			for _, n := range missed {
				b, _ := testKey.AppendReply(nil, probe.Reply{Nonce: n, Node: "node-b", State: probe.Ready})
				_, _ = forger.WriteToUDPAddrPort(b, to)
				b, _ = other.AppendReply(nil, probe.Reply{Nonce: n, Node: "node-a", State: probe.Ready})
				_, _ = forger.WriteToUDPAddrPort(b, to)
			}
		}
	}()
	waitState(t, p, changes, "node-a", liveness.Down, cfg.BusyTimeout)
	// Three misses of 12.5 ms, two re-probes 25 ms apart, and the probe's place in its
	// interval: about 100 ms without the forger.
	if took := time.Since(frozen); took > time.Second {
		t.Errorf("a frozen agent taken for down %v after it froze, with the forger, want what the failure threshold takes (about %v)", took, 2*interval)
	}
	if v, _ := testutil.GetCounterMetricValue(echoReplies); v != echoes {
		t.Errorf("baremetal_ccm_agent_echo_replies_total %v, want %v: a forged echo reply counted", v, echoes)
	}
	if v, _ := testutil.GetCounterMetricValue(lateAnswers); v != late {
		t.Errorf("baremetal_ccm_agent_probe_late_answers_total %v, want %v: a forged or replayed answer counted", v, late)
	}
}

// TestLateAnswerCountsOnce sends a missed probe's answer, late, then again and again, as
// a replay: it counts once. A second missed probe's answer, sent after the replays to the
// same socket, marks when they have all been read.
func TestLateAnswerCountsOnce(t *testing.T) {
	cfg := config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, BusyTimeout: time.Minute}
	_, s, conn, _, _ := frozenAgent(t, cfg)
	conn.running.Lock()
	defer conn.running.Unlock()
	var missed []uint64
	eventually(t, 2*time.Second, "two missed probes", func() bool {
		_, missed = s.noncesForTest()
		return len(missed) >= 2
	})
	to := s.proberAddr(socketOf("node-a", len(s.conns)))
	forger, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	send := func(nonce uint64) {
		b, err := testKey.AppendReply(nil, probe.Reply{Nonce: nonce, Node: "node-a", State: probe.Ready})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := forger.WriteToUDPAddrPort(b, to); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := testutil.GetCounterMetricValue(lateAnswers)
	for range 5 {
		send(missed[0])
	}
	send(missed[1])
	eventually(t, time.Second, "both late answers read", func() bool {
		v, _ := testutil.GetCounterMetricValue(lateAnswers)
		return v >= before+2
	})
	if v, _ := testutil.GetCounterMetricValue(lateAnswers); v != before+2 {
		t.Errorf("baremetal_ccm_agent_probe_late_answers_total went from %v to %v for one late answer sent five times and another once, want %v", before, v, before+2)
	}
}

// TestForgedPortUnreachable hands the prober what an ICMP port unreachable may quote:
// garbage, a request made with another key, one cut short or one byte too long, and
// requests of probes that ended already (a replay, or the error arriving after the
// probe's answer). None ends a probe; only the quote of a probe out, as the prober sent
// it, does.
func TestForgedPortUnreachable(t *testing.T) {
	cfg := config.Failover{ProbeInterval: time.Second, FailureThreshold: 3, BusyTimeout: time.Minute}
	_, s, conn, rec, _ := frozenAgent(t, cfg)
	other, err := probe.ParseKey([]byte("not the cluster's probe key, and long enough\n"))
	if err != nil {
		t.Fatal(err)
	}
	request := func(k *probe.Key, nonce uint64) []byte {
		return k.AppendRequest(nil, probe.Request{Nonce: nonce, Sender: probe.FromCCM, Instance: 1, Counter: 1, To: probe.NodeTag("node-a")})
	}
	// Once the agent has read two requests, the first has ended.
	var seen []uint64
	eventually(t, 5*time.Second, "two probes read", func() bool { seen = rec.read(); return len(seen) >= 2 })
	ended := seen[:len(seen)-1]
	conn.running.Lock()
	defer conn.running.Unlock()

	// A probe out ends at its deadline whatever comes, so each try takes one just sent
	// and tries again when a loaded machine let the deadline pass before the checks.
	for try := 1; ; try++ {
		before, _ := testutil.GetCounterMetricValue(unreachables)
		out := []uint64{justSent(t, s)}
		s.unreachable([]byte("not a probe at all"))
		s.unreachable(request(other, out[0]))
		s.unreachable(request(testKey, out[0])[:probe.RequestLen-1])
		s.unreachable(append(request(testKey, out[0]), 0)) // oversized: no request is longer
		for _, n := range ended {
			s.unreachable(request(testKey, n))
		}
		if v, _ := testutil.GetCounterMetricValue(unreachables); v != before {
			t.Fatalf("baremetal_ccm_agent_probe_port_unreachable_total went from %v to %v on forged and replayed quotes, want no change", before, v)
		}
		if now, _ := s.noncesForTest(); !slicesContainAny(now, out) {
			if try < 5 {
				continue
			}
			t.Fatalf("the probe out ended while only forgeries came, %d times (a second-long interval leaves it 250 ms)", try)
		}
		s.unreachable(request(testKey, out[0]))
		v, _ := testutil.GetCounterMetricValue(unreachables)
		now, _ := s.noncesForTest()
		if v == before && !slicesContainAny(now, out) && try < 5 {
			continue // its deadline came first
		}
		if v != before+1 {
			t.Errorf("baremetal_ccm_agent_probe_port_unreachable_total went from %v to %v on the quote of the probe out, want one more", before, v)
		}
		if slicesContainAny(now, out) {
			t.Errorf("the probe out is still out after a port unreachable quoting it")
		}
		return
	}
}

// justSent waits for a probe that went out since it last looked and returns its nonce.
func justSent(t *testing.T, s *sched) uint64 {
	t.Helper()
	prev, _ := s.noncesForTest()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		now, _ := s.noncesForTest()
		for _, n := range now {
			if !slices.Contains(prev, n) {
				return n
			}
		}
		prev = now
	}
	t.Fatal("no probe sent within 5s")
	return 0
}

// slicesContainAny reports whether a holds any element of b.
func slicesContainAny(a, b []uint64) bool {
	return slices.ContainsFunc(b, func(x uint64) bool { return slices.Contains(a, x) })
}

// TestReplyOfAnotherNodeSetsNothing checks that a reply naming another node than the one
// probed, as root on a node holding the probe key can make for any probe it sees, counts
// as that probe's miss and changes nothing else of the node probed: not the challenge its
// next requests echo, nor whether they may say it is idle (a flag an agent of an earlier
// release refuses).
func TestReplyOfAnotherNodeSetsNothing(t *testing.T) {
	port := agentPort(t)
	conn, err := net.ListenPacket("udp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	const forged = 42
	var answered atomic.Int64
	go func() {
		b := make([]byte, probe.MaxDatagram)
		for {
			n, from, err := conn.ReadFrom(b)
			if err != nil {
				return
			}
			req, err := testKey.ParseRequest(b[:n])
			if err != nil {
				continue
			}
			reply, _ := testKey.AppendReply(nil, probe.Reply{Nonce: req.Nonce, Challenge: forged, State: probe.Ready, Node: "node-b", TakesIdle: true})
			if _, err := conn.WriteTo(reply, from); err == nil {
				answered.Add(1)
			}
		}
	}()
	p, _ := startProber(t, port, testNode("node-a", "127.0.0.2"))
	eventually(t, 2*time.Second, "node-a down, its probes answered for node-b", func() bool {
		return p.Health("node-a") == liveness.Down && answered.Load() >= 3
	})
	p.mu.Lock()
	a := p.agents["node-a"]
	p.mu.Unlock()
	if a.takesIdle.Load() || a.challenge.Load() == forged {
		t.Errorf("a reply for node-b set node-a's probe: takes idle %v, challenge %d (forged %d)", a.takesIdle.Load(), a.challenge.Load(), forged)
	}
}
