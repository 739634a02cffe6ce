package standby

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/prober"
)

// fakeResponder is a Responder whose verdict and ccm the test sets.
type fakeResponder struct {
	mu         sync.Mutex
	verdict    probe.Verdict
	heard      bool // a ccm is heard: LastCCM is now
	covers     []string
	standsDown bool
	onVerdict  func()
}

func (r *fakeResponder) Verdict() probe.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdict
}

func (r *fakeResponder) LastCCM() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.heard {
		return time.Now()
	}
	return time.Time{}
}

func (r *fakeResponder) OnVerdict(f func()) { r.onVerdict = f }

func (r *fakeResponder) SetCovers(nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.covers = nodes
}

func (r *fakeResponder) SetStandsDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.standsDown = down
}

// stoodDown reports what the replies say: whether the agent takes itself for down.
func (r *fakeResponder) stoodDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.standsDown
}

// setHeard says whether a ccm is heard from now on.
func (r *fakeResponder) setHeard(heard bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heard = heard
}

// take holds v and calls the callback, as the probe responder does with any verdict,
// newer or not: Standby must judge for itself.
func (r *fakeResponder) take(seq uint64, down ...string) {
	r.mu.Lock()
	r.verdict = probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 1, Seq: seq}, Down: down}
	r.mu.Unlock()
	r.onVerdict()
}

// fakePeers is a Peers whose health the test sets, recording what Standby asks of it.
type fakePeers struct {
	mu        sync.Mutex
	health    map[string]prober.State
	coveredBy map[string][]string // the peers that say they stand in for a node
	targets   []map[string]bool   // every SetTargets, in order
	listeners []func(string)
	running   atomic.Int32 // Runs under way
	runs      atomic.Int32 // Runs started
}

func (p *fakePeers) Run(ctx context.Context) {
	p.runs.Add(1)
	p.running.Add(1)
	defer p.running.Add(-1)
	<-ctx.Done()
}

func (p *fakePeers) Health(node string) prober.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health[node]
}

func (p *fakePeers) CoveredBy(node string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.coveredBy[node]
}

// cover makes peer say it stands in for node, and tells the listeners of peer, as the
// prober does when peer's reply says so.
func (p *fakePeers) cover(peer, node string) {
	p.mu.Lock()
	if p.coveredBy == nil {
		p.coveredBy = map[string][]string{}
	}
	p.coveredBy[node] = append(p.coveredBy[node], peer)
	p.mu.Unlock()
	for _, f := range p.listeners {
		f(peer)
	}
}

func (p *fakePeers) OnChange(f func(string)) { p.listeners = append(p.listeners, f) }

func (p *fakePeers) SetTargets(nodes map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets = append(p.targets, maps.Clone(nodes))
}

// lastTargets returns the targets last set.
func (p *fakePeers) lastTargets() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.targets[len(p.targets)-1]
}

// set changes a peer's health and tells the listeners, as the prober does.
func (p *fakePeers) set(node string, s prober.State) {
	p.mu.Lock()
	if p.health == nil {
		p.health = map[string]prober.State{}
	}
	p.health[node] = s
	p.mu.Unlock()
	for _, f := range p.listeners {
		f(node)
	}
}

// newTest returns the Standby of node "self" over fakes, not running, and a counter of
// its notifications.
func newTest(t *testing.T) (*Standby, *fakeResponder, *fakePeers, *atomic.Int32) {
	t.Helper()
	r, p := &fakeResponder{}, &fakePeers{}
	s := New("self", config.Failover{ProbeInterval: 20 * time.Millisecond}, r, p)
	var notified atomic.Int32
	s.OnChange(func() { notified.Add(1) })
	return s, r, p, &notified
}

// run runs s until the test ends.
func run(t *testing.T, s *Standby) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// eventually polls cond until it holds, failing the test after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// downs returns the nodes s takes for down, sorted.
func downs(s *Standby) []string { return slices.Sorted(maps.Keys(s.Snapshot())) }

func TestVerdictReplacesTheDownNodes(t *testing.T) {
	s, r, p, notified := newTest(t)
	if got := p.lastTargets(); got == nil || len(got) != 0 {
		t.Errorf("New set targets %v, want none probed", got)
	}
	r.take(1, "a", "b")
	if got := downs(s); !slices.Equal(got, []string{"a", "b"}) || !s.Down("a") || s.Down("c") || notified.Load() != 1 {
		t.Fatalf("after a verdict of a, b: down %v, notified %d times", got, notified.Load())
	}
	r.take(2, "b")
	if got := downs(s); !slices.Equal(got, []string{"b"}) || notified.Load() != 2 {
		t.Errorf("after a verdict of b: down %v, notified %d times, want 2", got, notified.Load())
	}
	r.take(3, "b") // newer, but the same nodes: nothing to tell
	if notified.Load() != 2 {
		t.Errorf("a verdict changing nothing notified")
	}
	r.take(1, "a") // older than the one taken
	if got := downs(s); !slices.Equal(got, []string{"b"}) || notified.Load() != 2 {
		t.Errorf("an older verdict was taken: down %v", got)
	}
	if r.stoodDown() {
		t.Error("replies say the agent stands down, though no verdict names it")
	}
	r.take(4, "b", "self")
	if !s.Down("self") || !r.stoodDown() {
		t.Error("a verdict naming this node: its replies do not say it stands down")
	}
	r.take(5)
	if s.Down("self") || r.stoodDown() {
		t.Error("a verdict no longer naming this node: its replies still say it stands down")
	}
	snap := s.Snapshot()
	snap["x"] = true
	if s.Down("x") {
		t.Error("Snapshot is not a copy")
	}
	s.SetCovers([]string{"a"})
	if !slices.Equal(r.covers, []string{"a"}) {
		t.Errorf("SetCovers reached the responder as %v", r.covers)
	}
}

// TestSilenceChecksThePeers checks that the peers are probed while, and only while, no
// ccm is heard, and then only the other nodes of this one's plans.
func TestSilenceChecksThePeers(t *testing.T) {
	s, r, p, _ := newTest(t)
	s.SetPeers([]string{"a", "b"})
	if got := p.lastTargets(); len(got) != 0 {
		t.Errorf("SetPeers with a ccm heard set targets %v", got)
	}
	run(t, s) // no ccm heard yet
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	if got := p.lastTargets(); !maps.Equal(got, map[string]bool{"a": true, "b": true}) {
		t.Errorf("targets %v, want a and b", got)
	}
	s.SetPeers([]string{"c"})
	if got := p.lastTargets(); !maps.Equal(got, map[string]bool{"c": true}) {
		t.Errorf("after SetPeers(c) while silent, targets %v", got)
	}

	r.setHeard(true)
	eventually(t, "the peers no longer probed", func() bool { return p.running.Load() == 0 })
	if got := p.lastTargets(); len(got) != 0 {
		t.Errorf("with a ccm heard again, targets %v, want none", got)
	}
	r.setHeard(false)
	eventually(t, "the peers probed again", func() bool { return p.runs.Load() == 2 && p.running.Load() == 1 })
}

func TestPeerFoundDownWhileSilent(t *testing.T) {
	s, _, p, notified := newTest(t)
	s.SetPeers([]string{"a", "b"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.set("b", prober.Up)
	p.set("a", prober.Down)
	if !s.Down("a") || s.Down("b") || notified.Load() != 1 {
		t.Fatalf("a found down: down %v, notified %d times", downs(s), notified.Load())
	}
	p.set("a", prober.Down) // told again
	if notified.Load() != 1 {
		t.Error("a peer already down notified again")
	}
	// Back up, it stays down until a ccm says otherwise.
	p.set("a", prober.Up)
	if !s.Down("a") {
		t.Error("a peer that came back was taken for up without a ccm")
	}
}

func TestPeerFoundDownWhileHeardIsIgnored(t *testing.T) {
	s, r, p, notified := newTest(t)
	s.SetPeers([]string{"a"})
	p.set("a", prober.Down) // before any silence
	if s.Down("a") || notified.Load() != 0 {
		t.Fatalf("a peer found down with a ccm heard: down %v, notified %d", downs(s), notified.Load())
	}
	// Silent, then heard again: the peers' word counts no more.
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	r.setHeard(true)
	eventually(t, "the peers no longer probed", func() bool { return p.running.Load() == 0 })
	p.set("a", prober.Down)
	if s.Down("a") || notified.Load() != 0 {
		t.Errorf("a peer found down after a ccm was heard again: down %v, notified %d", downs(s), notified.Load())
	}
}

func TestNewerVerdictClearsPeersFoundDown(t *testing.T) {
	s, r, p, notified := newTest(t)
	s.SetPeers([]string{"a", "b"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.set("a", prober.Down)
	if !s.Down("a") {
		t.Fatal("a not taken for down")
	}
	r.take(1, "b")
	if got := downs(s); !slices.Equal(got, []string{"b"}) || notified.Load() != 2 {
		t.Errorf("after a verdict of b: down %v, notified %d times, want b and 2", got, notified.Load())
	}
}

// TestCoveredWhileSilentStandsDown checks an agent a peer stands in for while no ccm is
// heard, as after this node was cut off: it takes itself for down and says so, so that
// two nodes do not announce one address, until a ccm's verdict says otherwise.
func TestCoveredWhileSilentStandsDown(t *testing.T) {
	s, r, p, notified := newTest(t)
	p.cover("a", "self") // a ccm heard: that is the ccm's to judge
	if s.Down("self") || r.stoodDown() || notified.Load() != 0 {
		t.Fatalf("covered with a ccm heard: down %v, stands down %v", downs(s), r.stoodDown())
	}
	s.SetPeers([]string{"a"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.set("a", prober.Up) // a's next reply still says it covers this node
	if !s.Down("self") || !r.stoodDown() || notified.Load() != 1 {
		t.Fatalf("covered while silent: down %v, stands down %v, notified %d", downs(s), r.stoodDown(), notified.Load())
	}
	if s.Down("a") {
		t.Error("the peer that answers was taken for down")
	}
	r.take(1)
	if s.Down("self") || r.stoodDown() {
		t.Errorf("a verdict naming no one: down %v, stands down %v", downs(s), r.stoodDown())
	}
}
