package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"crypto/ed25519"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// talker speaks to a Responder through Handle as one prober instance does: counters of
// its own, the node's tag, and the challenge of the last reply echoed.
type talker struct {
	r                *Responder
	from             probe.Sender
	instance         uint64
	counter, echo    uint64
	noEcho, wrongTag bool
}

func newTalker(r *Responder, from probe.Sender, instance uint64) *talker {
	return &talker{r: r, from: from, instance: instance}
}

// next returns the talker's next request.
func (c *talker) next() probe.Request {
	c.counter++
	req := probe.Request{Nonce: c.counter, Sender: c.from, Instance: c.instance, Counter: c.counter, To: c.r.tag, Echo: c.echo}
	if c.wrongTag {
		req.To = probe.NodeTag("node-b")
	}
	return req
}

// send hands b to the Responder, and returns its reply, if any, recording the challenge.
func (c *talker) send(t testing.TB, b []byte) (probe.Reply, bool) {
	t.Helper()
	out, ok := c.r.Handle(b, nil)
	if !ok {
		return probe.Reply{}, false
	}
	reply, err := testKey.ParseReply(out)
	if err != nil {
		t.Fatal(err)
	}
	if !c.noEcho {
		c.echo = reply.Challenge
	}
	return reply, true
}

// ask sends req and returns the reply, failing the test if there is none.
func (c *talker) ask(t testing.TB, req probe.Request) probe.Reply {
	t.Helper()
	reply, ok := c.send(t, testKey.AppendRequest(nil, req))
	if !ok {
		t.Fatalf("no reply to %+v", req)
	}
	return reply
}

func newTestResponder(t *testing.T) *Responder {
	t.Helper()
	r, err := New("node-a", testKey, testVerifier, testInterval, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sendVerdict hands the Responder v, signed by the ccm and sealed with key.
func sendVerdict(t *testing.T, r *Responder, key *probe.Key, v probe.Verdict) {
	t.Helper()
	sendSignedVerdict(t, r, key, testSigner, v)
}

// sendSignedVerdict hands the Responder v, signed by s and sealed with key.
func sendSignedVerdict(t *testing.T, r *Responder, key *probe.Key, s *probe.Signer, v probe.Verdict) {
	t.Helper()
	parts, err := key.AppendVerdict(s, v)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range parts {
		if _, ok := r.Handle(b, nil); ok {
			t.Fatal("a verdict was answered")
		}
	}
}

// TestResponderAnswersEachCounterOnce checks that a request replayed, from a capture or
// late, is never answered and spends no budget: one captured request flooded at an agent
// must not starve the ccm's probes, nor make the agent a reflector.
func TestResponderAnswersEachCounterOnce(t *testing.T) {
	synctest.Test(t, testResponderAnswersEachCounterOnce)
}

func testResponderAnswersEachCounterOnce(t *testing.T) {
	r := newTestResponder(t)
	ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
	captured := testKey.AppendRequest(nil, ccm.next())
	if _, ok := ccm.send(t, captured); !ok {
		t.Fatal("the first request was not answered")
	}
	for i := range 5000 {
		if _, ok := ccm.send(t, captured); ok {
			t.Fatalf("replay %d was answered", i)
		}
		if i%50 == 0 {
			ccm.ask(t, ccm.next()) // the ccm's real probes all get through
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Late by more than the window: refused as if seen.
	late := ccm.next()
	for range windowSize {
		ccm.ask(t, ccm.next())
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok := ccm.send(t, testKey.AppendRequest(nil, late)); ok {
		t.Error("a request a window late was answered")
	}
	if st := r.Stats(); st.Replayed != 5001 || st.Limited != 0 {
		t.Errorf("Stats = %+v, want 5001 replayed, none limited", st)
	}
}

// TestResponderBudgets checks that each sender has a budget of its own: a node with 500
// peers checking it while no ccm is heard answers them all, and one sender flooding with
// fresh requests (a peer gone wrong) exhausts only its own.
func TestResponderBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTestResponder(t)
		flood := newTalker(r, probe.FromAgent, probe.NewInstance())
		ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
		peers := make([]*talker, 500)
		for i := range peers {
			peers[i] = newTalker(r, probe.FromAgent, probe.NewInstance())
		}
		var flooded, floodAnswered int
		for round := range 20 { // two seconds of probes every 100 ms
			for range 1000 {
				flooded++
				if _, ok := flood.send(t, testKey.AppendRequest(nil, flood.next())); ok {
					floodAnswered++
				}
			}
			ccm.ask(t, ccm.next())
			for i, p := range peers {
				if _, ok := p.send(t, testKey.AppendRequest(nil, p.next())); !ok {
					t.Fatalf("round %d: peer %d was not answered", round, i)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if want := peerBurst + 2*peerRate; floodAnswered > want {
			t.Errorf("a flooding sender had %d of %d answered, want at most %d", floodAnswered, flooded, want)
		}
	})
}

// TestResponderAnswersOnlyItsNode checks that a request recorded on its way to another
// node is not answered.
func TestResponderAnswersOnlyItsNode(t *testing.T) {
	r := newTestResponder(t)
	ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
	ccm.wrongTag = true
	if _, ok := ccm.send(t, testKey.AppendRequest(nil, ccm.next())); ok {
		t.Error("a request for node-b was answered by node-a")
	}
	if st := r.Stats(); st.Misdirected != 1 || !r.LastCCM().IsZero() {
		t.Errorf("Stats = %+v, LastCCM %v; want 1 misdirected and no ccm heard", st, r.LastCCM())
	}
}

// TestResponderTakesOnlyEchoingRequestsAsLife checks that only a ccm request echoing a
// recent challenge counts as a sign of the ccm's life: a request recorded earlier and
// never delivered, or an agent's, must not keep an agent from noticing that no ccm leads.
func TestResponderTakesOnlyEchoingRequestsAsLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTestResponder(t)
		agent := newTalker(r, probe.FromAgent, probe.NewInstance())
		agent.ask(t, agent.next())
		agent.ask(t, agent.next())
		if !r.LastCCM().IsZero() {
			t.Fatal("an agent's request counted as a ccm's life")
		}
		ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
		req := ccm.next()
		req.Verdict = 3
		ccm.ask(t, req) // no challenge to echo yet: answered, no sign of life
		if !r.LastCCM().IsZero() {
			t.Fatal("a request echoing no challenge counted as a ccm's life")
		}
		recorded := ccm.next() // recorded on the way, never delivered
		recorded.Verdict = 3
		req = ccm.next()
		req.Verdict = 3
		ccm.ask(t, req)
		heard := r.LastCCM()
		if heard.IsZero() {
			t.Fatal("a request echoing the challenge did not count as a ccm's life")
		}
		if got, want := r.CCMVerdict(), (probe.VerdictRef{Instance: ccm.instance, Seq: 3}); got != want {
			t.Errorf("CCMVerdict = %+v, want %+v", got, want)
		}
		time.Sleep(3 * ChallengeEvery)
		if _, ok := ccm.send(t, testKey.AppendRequest(nil, recorded)); !ok {
			t.Fatal("a fresh counter was not answered")
		}
		if got := r.LastCCM(); !got.Equal(heard) {
			t.Errorf("a request echoing a challenge %v old moved LastCCM", 3*ChallengeEvery)
		}
		ccm.ask(t, ccm.next())
		if got := r.LastCCM(); !got.After(heard) {
			t.Error("the ccm's next request did not move LastCCM")
		}
	})
}

// TestResponderFollowsOneCCM checks that an agent follows one ccm instance, whatever the
// others say, until it falls silent for CCMForgetAfter: no instance on the wire, however
// large, makes it ignore a later ccm for longer.
func TestResponderFollowsOneCCM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTestResponder(t)
		a := newTalker(r, probe.FromCCM, 10)
		b := newTalker(r, probe.FromCCM, ^uint64(0))
		a.ask(t, a.next())
		a.ask(t, a.next())
		heard := r.LastCCM()
		// b is answered, so that it sees the agent alive, but not followed.
		b.ask(t, b.next())
		b.ask(t, b.next())
		if got := r.LastCCM(); !got.Equal(heard) {
			t.Error("another ccm's request moved LastCCM while the one followed is heard")
		}
		sendVerdict(t, r, testKey, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: b.instance, Seq: 1}, Down: []string{"node-c"}})
		if got := r.Verdict(); got.Instance != 0 {
			t.Errorf("a verdict of a ccm not followed was taken: %+v", got)
		}
		sendVerdict(t, r, testKey, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: a.instance, Seq: 1}})
		if got := r.Verdict(); got.Instance != a.instance {
			t.Errorf("the verdict of the ccm followed was not taken: holds %+v", got.VerdictRef)
		}
		time.Sleep(CCMForgetAfter)
		b.ask(t, b.next()) // its echo is too old by now
		b.ask(t, b.next())
		if got := r.LastCCM(); !got.After(heard) {
			t.Fatal("another ccm was not followed once the one followed fell silent")
		}
		sendVerdict(t, r, testKey, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: b.instance, Seq: 1}})
		if got := r.Verdict(); got.Instance != b.instance {
			t.Errorf("the new ccm's first verdict was not taken: holds %+v", got.VerdictRef)
		}
		// And back: the huge instance orders nothing.
		time.Sleep(CCMForgetAfter)
		a.ask(t, a.next())
		a.ask(t, a.next())
		sendVerdict(t, r, testKey, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: a.instance, Seq: 2}})
		if got := r.Verdict(); got.VerdictRef != (probe.VerdictRef{Instance: a.instance, Seq: 2}) {
			t.Errorf("after the huge instance fell silent, the verdict held is %+v", got.VerdictRef)
		}
	})
}

// TestResponderTakesOnlyNewerVerdicts checks that a verdict is taken only when newer than
// the one held, and only from the key: a replayed, late or forged verdict could otherwise
// take a live node's addresses or give a dead one's back.
func TestResponderTakesOnlyNewerVerdicts(t *testing.T) {
	r := newTestResponder(t)
	calls := 0
	r.OnVerdict(func() { calls++ })
	ccm := newTalker(r, probe.FromCCM, 10)
	ccm.ask(t, ccm.next())
	ccm.ask(t, ccm.next())
	// A verdict of a large cluster's worth of nodes, in many datagrams.
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("node-%04d", i)
	}
	held := probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 2}, Down: many}
	sendVerdict(t, r, testKey, held)
	if calls != 1 {
		t.Fatal("a newer verdict did not call OnVerdict")
	}
	if got := r.Verdict(); !reflect.DeepEqual(got, held) {
		t.Fatalf("Verdict() holds %d down at %+v, want the %d sent at %+v", len(got.Down), got.VerdictRef, len(held.Down), held.VerdictRef)
	}
	if got := ccm.ask(t, ccm.next()); got.Verdict != held.VerdictRef {
		t.Errorf("reply holds verdict %+v, want %+v", got.Verdict, held.VerdictRef)
	}
	other := mustKey("another key, of the same length: 0123456789\n")
	// Root on a node: the probe key, and a private key that is not the ccm's.
	rogue := probe.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	heldParts, _ := testKey.AppendVerdict(testSigner, held)
	for i, v := range []struct {
		key    *probe.Key
		signer *probe.Signer
		v      probe.Verdict
	}{
		{testKey, testSigner, held}, // replayed
		{testKey, testSigner, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 1}}},                      // late
		{testKey, testSigner, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 9, Seq: 100}}},                     // a ccm not followed
		{other, testSigner, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 9}, Down: nil}},             // forged
		{testKey, rogue, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 9}, Down: []string{"node-a"}}}, // not the ccm's
		// Late and not the ccm's: stale before its signature is checked, so that a flood of
		// replayed verdicts costs the keyed hash, not an Ed25519 verification, each.
		{testKey, rogue, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 1}, Down: []string{"node-a"}}},
	} {
		sendSignedVerdict(t, r, v.key, v.signer, v.v)
		if got := r.Verdict(); got.VerdictRef != held.VerdictRef || len(got.Down) != len(many) {
			t.Errorf("verdict %d (%+v) replaced the one held: now %+v", i, v.v.VerdictRef, got.VerdictRef)
		}
	}
	if st := r.Stats(); st.Verdicts != 1 || st.StaleVerdicts != uint64(len(heldParts))+3 || st.Unauthenticated != 1 || st.Unsigned != 1 || calls != 1 {
		t.Errorf("Stats = %+v, %d calls of OnVerdict; want 1 verdict taken, %d stale datagrams, 1 unauthenticated, 1 unsigned, 1 call", st, calls, len(heldParts)+3)
	}
	next := probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 3}, Down: []string{"node-b"}}
	sendVerdict(t, r, testKey, next)
	if got := r.Verdict(); !reflect.DeepEqual(got, next) || calls != 2 {
		t.Errorf("after %+v, Verdict() = %+v", next, got)
	}
}

// BenchmarkResponderReplayedVerdict is the cost of a verdict an agent holds already, heard
// again: a replay, or the ccm's own resend. Its signature is never checked.
func BenchmarkResponderReplayedVerdict(b *testing.B) {
	r, err := New("node-a", testKey, testVerifier, testInterval, nil)
	if err != nil {
		b.Fatal(err)
	}
	ccm := newTalker(r, probe.FromCCM, 10)
	ccm.ask(b, ccm.next())
	ccm.ask(b, ccm.next())
	parts, err := testKey.AppendVerdict(testSigner, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 2}, Down: []string{"node-b"}})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle(parts[0], nil)
	if r.Verdict().Seq != 2 {
		b.Fatal("the verdict was not taken")
	}
	for b.Loop() {
		r.Handle(parts[0], nil)
	}
	if st := r.Stats(); st.StaleVerdicts == 0 {
		b.Fatalf("Stats = %+v, want stale verdicts", st)
	}
}

// TestResponderCovers checks what replies say the agent stands in for (only valid names,
// once each, in shares that fit), and whether it stands down.
func TestResponderCovers(t *testing.T) {
	r := newTestResponder(t)
	ccm := newTalker(r, probe.FromCCM, 1)
	covers := []string{"", strings.Repeat("a", 254), "node-0"}
	var want []uint64
	for i := range 1000 {
		covers = append(covers, "node-"+strconv.Itoa(i))
		want = append(want, probe.NodeTag("node-"+strconv.Itoa(i)))
	}
	slices.Sort(want)
	r.SetCovers(covers)
	covers[3] = "changed-after-set" // the responder keeps its own copy
	g := probe.NewCoverGather()
	for !g.Whole() {
		reply := ccm.ask(t, ccm.next())
		if reply.CoverSum.Len != len(want) || len(reply.Covers) == 0 || len(reply.Covers) == len(want) {
			t.Fatalf("reply carries %d covers of %d, want a share of %d", len(reply.Covers), reply.CoverSum.Len, len(want))
		}
		g.Take(reply.Covers, reply.CoverSum)
	}
	if !slices.Equal(g.Items(), want) {
		t.Errorf("replies cover %d nodes, want node-0 to node-999", len(g.Items()))
	}
	r.SetCovers(nil)
	if got := ccm.ask(t, ccm.next()); len(got.Covers) != 0 || got.CoverSum != (probe.ListSum{}) {
		t.Errorf("reply covers %v of %+v after SetCovers(nil)", got.Covers, got.CoverSum)
	}
	if ccm.ask(t, ccm.next()).StandsDown {
		t.Error("a new responder's reply says it stands down")
	}
	r.SetStandsDown(true)
	if !ccm.ask(t, ccm.next()).StandsDown {
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

// TestResponderRefusesAnotherKey checks that a request made with another key is answered
// with a refusal carrying its nonce, once a second at most, and never with a reply.
func TestResponderRefusesAnotherKey(t *testing.T) {
	r := newTestResponder(t)
	other := mustKey("another key, of the same length: 0123456789\n")
	refused := 0
	for nonce := range uint64(100) {
		in := other.AppendRequest(nil, probe.Request{Nonce: nonce + 1, Sender: probe.FromCCM, Instance: 1, Counter: nonce + 1, To: r.tag})
		out, ok := r.Handle(in, nil)
		if !ok {
			continue
		}
		refused++
		if got, err := probe.ParseRefusal(out); err != nil || got != nonce+1 {
			t.Errorf("answer to a request with another key: % x (%d, %v), want a refusal of nonce %d", out, got, err, nonce+1)
		}
	}
	if refused < 1 || refused > 2 {
		t.Errorf("%d of 100 requests with another key refused at once, want 1 or 2", refused)
	}
	if st := r.Stats(); st.Unauthenticated != 100 {
		t.Errorf("Stats = %+v, want 100 unauthenticated", st)
	}
}
