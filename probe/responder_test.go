package probe

import (
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testPeer is a Responder serving on a loopback socket and a client socket to talk to it.
type testPeer struct {
	r      *Responder
	server net.PacketConn
	client net.PacketConn
	// verdicts receives a value each time the Responder calls its OnVerdict callback.
	verdicts chan struct{}
}

// newTestPeer starts a Responder for node-a on 127.0.0.1 until the test ends.
func newTestPeer(t *testing.T) *testPeer {
	t.Helper()
	server, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	client, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	r, err := NewResponder("node-a", testKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPeer{r: r, server: server, client: client, verdicts: make(chan struct{}, 100)}
	r.OnVerdict(func() { p.verdicts <- struct{}{} })
	go r.Serve(server)
	return p
}

// send writes b to the Responder.
func (p *testPeer) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := p.client.WriteTo(b, p.server.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

// ask sends req and returns the reply. The Responder handles datagrams in order, so once
// the reply is read everything sent before req has been handled too.
func (p *testPeer) ask(t *testing.T, req Request) Reply {
	t.Helper()
	p.send(t, testKey.AppendRequest(nil, req))
	b := make([]byte, MaxDatagram)
	for {
		p.client.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := p.client.ReadFrom(b)
		if err != nil {
			t.Fatalf("no reply to %+v: %v", req, err)
		}
		reply, err := testKey.ParseReply(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		if reply.Nonce == req.Nonce {
			return reply
		}
	}
}

// verdict sends v, signed with key, and waits until the Responder has handled it.
func (p *testPeer) verdict(t *testing.T, key *Key, v Verdict) {
	t.Helper()
	b, err := key.AppendVerdict(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	p.send(t, b)
	p.ask(t, Request{Nonce: 999, Sender: FromAgent})
}

// TestResponderTakesOnlyFreshRequestsAsLife checks that only a ccm request newer than
// every one before counts as a sign of the ccm's life: a replayed or late one, or an
// agent's, must not keep an agent from noticing that no ccm leads.
func TestResponderTakesOnlyFreshRequestsAsLife(t *testing.T) {
	p := newTestPeer(t)
	// An agent's request, however large its numbers, is answered, and is no ccm.
	if got := p.ask(t, Request{Nonce: 1, Sender: FromAgent, Instance: 100, Counter: 100}); got.Node != "node-a" {
		t.Errorf("reply to an agent = %+v", got)
	}
	if got := p.r.LastCCM(); !got.IsZero() {
		t.Fatalf("after an agent's request, LastCCM = %v, want zero", got)
	}
	p.ask(t, Request{Nonce: 2, Sender: FromCCM, Instance: 10, Counter: 5, Verdict: 3})
	first := p.r.LastCCM()
	if first.IsZero() {
		t.Fatal("a fresh ccm request left LastCCM zero")
	}
	if got, want := p.r.CCMVerdict(), (VerdictRef{Instance: 10, Seq: 3}); got != want {
		t.Errorf("CCMVerdict = %+v, want %+v", got, want)
	}
	for _, stale := range []Request{
		{Nonce: 3, Sender: FromCCM, Instance: 10, Counter: 5, Verdict: 4},   // replayed
		{Nonce: 4, Sender: FromCCM, Instance: 10, Counter: 4, Verdict: 4},   // late
		{Nonce: 5, Sender: FromCCM, Instance: 9, Counter: 1000, Verdict: 4}, // an older ccm
		{Nonce: 6, Sender: FromAgent, Instance: 11, Counter: 1, Verdict: 4},
	} {
		if got := p.ask(t, stale); got.Nonce != stale.Nonce {
			t.Errorf("%+v: reply %+v", stale, got)
		}
		if got := p.r.LastCCM(); !got.Equal(first) {
			t.Errorf("%+v moved LastCCM from %v to %v", stale, first, got)
		}
		if got := p.r.CCMVerdict(); got.Seq != 3 {
			t.Errorf("%+v moved CCMVerdict to %+v", stale, got)
		}
	}
	p.ask(t, Request{Nonce: 7, Sender: FromCCM, Instance: 10, Counter: 6})
	second := p.r.LastCCM()
	if second.Equal(first) {
		t.Error("a newer counter did not move LastCCM")
	}
	// A later ccm starts its counter over.
	p.ask(t, Request{Nonce: 8, Sender: FromCCM, Instance: 11, Counter: 1})
	if got := p.r.LastCCM(); got.Equal(second) {
		t.Error("a newer instance did not move LastCCM")
	}
	// A reply is counted once sent, which may be after it arrived.
	waitStats(t, p.r, "8 requests, all answered", func(st Stats) bool { return st.Requests == 8 && st.Replies == 8 })
}

// TestResponderTakesOnlyNewerVerdicts checks that a verdict is taken only when newer than
// the one held, and only from the key: a replayed, late or forged verdict could otherwise
// take a live node's addresses or give a dead one's back.
func TestResponderTakesOnlyNewerVerdicts(t *testing.T) {
	p := newTestPeer(t)
	// A verdict of a large cluster's worth of nodes still fits in one datagram.
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("node-%04d", i)
	}
	held := Verdict{VerdictRef: VerdictRef{Instance: 10, Seq: 2}, Down: many}
	p.verdict(t, testKey, held)
	select {
	case <-p.verdicts:
	default:
		t.Fatal("a newer verdict did not call OnVerdict")
	}
	if got := p.r.Verdict(); !reflect.DeepEqual(got, held) {
		t.Fatalf("Verdict() holds %d down at %+v, want the %d sent at %+v", len(got.Down), got.VerdictRef, len(held.Down), held.VerdictRef)
	}
	if got := p.ask(t, Request{Nonce: 1, Sender: FromCCM, Instance: 10, Counter: 1}); got.Verdict != held.VerdictRef {
		t.Errorf("reply holds verdict %+v, want %+v", got.Verdict, held.VerdictRef)
	}

	other := mustKey("another key, of the same length: 0123456789\n")
	for i, v := range []struct {
		key *Key
		v   Verdict
	}{
		{testKey, held}, // replayed
		{testKey, Verdict{VerdictRef: VerdictRef{Instance: 10, Seq: 1}}},          // late
		{testKey, Verdict{VerdictRef: VerdictRef{Instance: 9, Seq: 100}}},         // an older ccm's
		{other, Verdict{VerdictRef: VerdictRef{Instance: 99, Seq: 1}, Down: nil}}, // forged
	} {
		p.verdict(t, v.key, v.v)
		if got := p.r.Verdict(); got.VerdictRef != held.VerdictRef || len(got.Down) != len(many) {
			t.Errorf("verdict %d (%+v) replaced the one held: now %+v", i, v.v.VerdictRef, got.VerdictRef)
		}
	}
	if st := p.r.Stats(); st.Verdicts != 1 || st.StaleVerdicts != 3 || st.Unauthenticated != 1 {
		t.Errorf("Stats = %+v, want 1 verdict taken, 3 stale, 1 unauthenticated", st)
	}
	select {
	case <-p.verdicts:
		t.Error("a verdict not taken called OnVerdict")
	default:
	}

	// The same ccm's next verdict, then a later ccm's first.
	for _, next := range []Verdict{
		{VerdictRef: VerdictRef{Instance: 10, Seq: 3}, Down: []string{"node-b"}},
		{VerdictRef: VerdictRef{Instance: 11, Seq: 1}},
	} {
		p.verdict(t, testKey, next)
		if got := p.r.Verdict(); !reflect.DeepEqual(got, next) {
			t.Errorf("after %+v, Verdict() = %+v", next, got)
		}
		select {
		case <-p.verdicts:
		default:
			t.Errorf("verdict %+v did not call OnVerdict", next.VerdictRef)
		}
	}
}

// TestResponderCovers checks what replies say the agent stands in for (only valid names,
// and no more than fit), and whether it stands down.
func TestResponderCovers(t *testing.T) {
	p := newTestPeer(t)
	covers := []string{"", strings.Repeat("a", 254)}
	for i := range MaxCovers + 5 {
		covers = append(covers, "node-"+strconv.Itoa(i))
	}
	p.r.SetCovers(covers)
	covers[2] = "changed-after-set" // the responder keeps its own copy
	got := p.ask(t, Request{Nonce: 1, Sender: FromCCM, Instance: 1, Counter: 1}).Covers
	if len(got) != MaxCovers || got[0] != "node-0" || got[MaxCovers-1] != "node-"+strconv.Itoa(MaxCovers-1) {
		t.Errorf("reply covers %q, want node-0 to node-%d", got, MaxCovers-1)
	}
	p.r.SetCovers(nil)
	if got := p.ask(t, Request{Nonce: 2, Sender: FromCCM, Instance: 1, Counter: 2}).Covers; len(got) != 0 {
		t.Errorf("reply covers %q after SetCovers(nil)", got)
	}
	if p.ask(t, Request{Nonce: 3, Sender: FromAgent}).StandsDown {
		t.Error("a new responder's reply says it stands down")
	}
	p.r.SetStandsDown(true)
	if !p.ask(t, Request{Nonce: 4, Sender: FromAgent}).StandsDown {
		t.Error("after SetStandsDown(true), the reply does not say so")
	}
}

// waitStats polls r's Stats until cond holds, failing the test after a while.
func waitStats(t *testing.T, r *Responder, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for st := r.Stats(); !cond(st); st = r.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("Stats = %+v, want %s", st, what)
		}
		time.Sleep(time.Millisecond)
	}
}
