package verdict

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/peers"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// fakeResponder is a Responder whose verdict and ccm the test sets.
type fakeResponder struct {
	mu         sync.Mutex
	verdict    probe.Verdict
	heard      bool // a ccm is heard: LastCCM is now, or last if set
	last       time.Time
	ccm        probe.VerdictRef // the verdict the ccm's requests say it is at
	covers     []string
	standsDown bool
	onVerdict  func()
	// cacheVersion is the version of the agent's Service cache.
	cacheVersion atomic.Uint64
}

func (r *fakeResponder) Verdict() probe.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdict
}

func (r *fakeResponder) Unread() bool { return false }

func (r *fakeResponder) SilentAfter() time.Duration { return probe.SilentAfter(20 * time.Millisecond) } // New's interval, below

func (r *fakeResponder) LastCCM() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.heard && !r.last.IsZero():
		return r.last
	case r.heard:
		return time.Now()
	}
	return time.Time{}
}

// setLast says when the ccm was last heard, from now on.
func (r *fakeResponder) setLast(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = at
}

func (r *fakeResponder) CacheVersion() uint64 { return r.cacheVersion.Load() }

func (r *fakeResponder) CCMVerdict() probe.VerdictRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ccm
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

// take holds a verdict of seq and calls the callback, as the probe responder does with
// any verdict, newer or not: Keeper must judge for itself.
func (r *fakeResponder) take(seq uint64, down ...string) {
	r.mu.Lock()
	r.verdict = probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 1, Seq: seq}, Down: down}
	r.mu.Unlock()
	r.onVerdict()
}

// fromCCM is a verdict of a ccm that is heard and says it is at that verdict: taking it
// confirms where the agent stands.
func (r *fakeResponder) fromCCM(seq uint64, down ...string) {
	r.mu.Lock()
	r.heard, r.ccm = true, probe.VerdictRef{Instance: 1, Seq: seq}
	r.mu.Unlock()
	r.take(seq, down...)
}

// fakePeers is a Peers whose health the test sets, recording what Keeper asks of it.
type fakePeers struct {
	mu        sync.Mutex
	health    map[string]liveness.State
	coveredBy map[string][]string // the peers that say they stand in for a node
	agents    map[string]peers.Agent
	targets   []map[string]bool // every SetTargets, in order
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

func (p *fakePeers) Health(node string) liveness.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health[node]
}

func (p *fakePeers) CoveredBy(node string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.coveredBy[node]
}

func (p *fakePeers) Agents() map[string]peers.Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.agents)
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
func (p *fakePeers) set(node string, s liveness.State) {
	p.mu.Lock()
	if p.health == nil {
		p.health = map[string]liveness.State{}
	}
	p.health[node] = s
	p.mu.Unlock()
	p.tell(node)
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
	p.tell(peer)
}

// probed records a probe of node now, answered or not, as Agents reports it.
func (p *fakePeers) probed(node string, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents == nil {
		p.agents = map[string]peers.Agent{}
	}
	a := p.agents[node]
	if answered {
		a.LastAnswer = time.Now()
	}
	p.agents[node] = a
}

// cache sets the resourceVersion node's agent says its Service cache has reached.
func (p *fakePeers) cache(node string, v uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.agents[node]
	a.CacheVersion = v
	p.agents[node] = a
}

func (p *fakePeers) tell(node string) {
	for _, f := range p.listeners {
		f(node)
	}
}

// newTest returns the Keeper of node "self" over fakes, not running, and a counter of
// its notifications.
func newTest(t *testing.T) (*Keeper, *fakeResponder, *fakePeers, *atomic.Int32) {
	t.Helper()
	r, p := &fakeResponder{}, &fakePeers{}
	s := New("self", config.Failover{ProbeInterval: 20 * time.Millisecond}, r, p)
	var notified atomic.Int32
	s.OnChange(func() { notified.Add(1) })
	return s, r, p, &notified
}

// run runs s until the test ends.
func run(t *testing.T, s *Keeper) {
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
func downs(s *Keeper) []string { return slices.Sorted(maps.Keys(s.Snapshot())) }

// TestUnconfirmedUntilTheCCMsVerdict checks that an agent that starts takes itself for
// down until it holds the verdict the ccm is at: others may have taken its addresses.
func TestUnconfirmedUntilTheCCMsVerdict(t *testing.T) {
	s, r, _, notified := newTest(t)
	if got := downs(s); !slices.Equal(got, []string{"self"}) {
		t.Fatalf("a fresh agent takes %v for down, want itself", got)
	}
	// The ccm's requests say it is at a later verdict than the one taken.
	r.setHeard(true)
	r.mu.Lock()
	r.ccm = probe.VerdictRef{Instance: 1, Seq: 2}
	r.mu.Unlock()
	r.take(1, "a")
	if got := downs(s); !slices.Equal(got, []string{"a", "self"}) || !r.stoodDown() {
		t.Errorf("holding an older verdict than the ccm's: down %v, stands down %v; want a and itself", got, r.stoodDown())
	}
	before := notified.Load()
	r.fromCCM(2, "a")
	if got := downs(s); !slices.Equal(got, []string{"a"}) || r.stoodDown() || notified.Load() == before {
		t.Errorf("holding the ccm's verdict: down %v, stands down %v, notified %v", got, r.stoodDown(), notified.Load() > before)
	}
}

func TestVerdictReplacesTheDownNodes(t *testing.T) {
	s, r, p, notified := newTest(t)
	if got := p.lastTargets(); got == nil || len(got) != 0 {
		t.Errorf("New set targets %v, want none probed", got)
	}
	r.fromCCM(1, "a", "b")
	if got := downs(s); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after a verdict of a, b: down %v", got)
	}
	n := notified.Load()
	r.fromCCM(2, "b")
	if got := downs(s); !slices.Equal(got, []string{"b"}) || notified.Load() == n {
		t.Errorf("after a verdict of b: down %v, notified %v", got, notified.Load() > n)
	}
	n = notified.Load()
	r.fromCCM(3, "b") // newer, but the same nodes: nothing to tell
	if notified.Load() != n {
		t.Errorf("a verdict changing nothing notified")
	}
	r.take(1, "a") // older than the one taken
	if got := downs(s); !slices.Equal(got, []string{"b"}) || notified.Load() != n {
		t.Errorf("an older verdict was taken: down %v", got)
	}
	r.fromCCM(4, "b", "self")
	if got := downs(s); !slices.Equal(got, []string{"b", "self"}) || !r.stoodDown() {
		t.Errorf("a verdict naming this node: down %v, stands down %v", got, r.stoodDown())
	}
	r.fromCCM(5)
	if got := downs(s); len(got) != 0 || r.stoodDown() {
		t.Errorf("a verdict naming no one: down %v, stands down %v", got, r.stoodDown())
	}
	snap := s.Snapshot()
	snap["x"] = true
	if s.Snapshot()["x"] {
		t.Error("Snapshot is not a copy")
	}
	s.SetCovers([]string{"a"})
	if !slices.Equal(r.covers, []string{"a"}) {
		t.Errorf("SetCovers reached the responder as %v", r.covers)
	}
}

// TestUnconfirm checks an agent that lost an interface: it may have been cut off, so it
// takes itself for down until the ccm's verdict confirms where it stands again.
func TestUnconfirm(t *testing.T) {
	s, r, _, notified := newTest(t)
	r.fromCCM(1, "a")
	n := notified.Load()
	s.Unconfirm()
	if got := downs(s); !slices.Equal(got, []string{"a", "self"}) || !r.stoodDown() || notified.Load() == n {
		t.Fatalf("after Unconfirm: down %v, stands down %v, notified %v", got, r.stoodDown(), notified.Load() > n)
	}
	run(t, s) // the ccm, heard, is at the verdict held
	eventually(t, "the agent confirmed again", func() bool { return !s.Snapshot()["self"] && !r.stoodDown() })
}

// TestUnconfirmNotByARequestQueuedBefore checks that a ccm request taken just after the
// agent lost an interface does not confirm where the node stands: it was most likely
// sent before, and waited in the socket while the link went down. A node whose link went
// down would take itself for confirmed, and announce again once the link came back, over
// the standby that took its addresses meanwhile.
func TestUnconfirmNotByARequestQueuedBefore(t *testing.T) {
	s, r, _, _ := newTest(t)
	r.fromCCM(1, "a")
	s.Unconfirm()
	s.mu.Lock()
	lost := s.unconfirmed
	s.mu.Unlock()
	r.setLast(lost.Add(time.Millisecond))
	s.confirm()
	if !s.Snapshot()["self"] || !r.stoodDown() {
		t.Fatal("a request taken a millisecond after the loss confirmed where the node stands")
	}
	r.setLast(lost.Add(s.settle + time.Millisecond))
	s.confirm()
	if s.Snapshot()["self"] || r.stoodDown() {
		t.Error("a request taken an interval after the loss did not confirm where the node stands")
	}
}
