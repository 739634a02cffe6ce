package verdict

import (
	"maps"
	"slices"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

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

// TestConfirmedByThePeers checks how an agent that hears no ccm learns where it stands:
// once the plans are known and every peer has answered since, none with a Service cache
// ahead of its own. A node that hears no one cannot tell its own isolation from
// everyone's death; one that hears only some may miss the peer that stands in for it.
func TestConfirmedByThePeers(t *testing.T) {
	s, r, p, _ := newTest(t)
	r.cacheVersion.Store(10)
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.probed("a", true)
	s.confirm() // the plans are not known yet
	if !s.Snapshot()["self"] {
		t.Fatal("confirmed before the plans were read")
	}
	s.SetPeers([]string{"a", "b"})
	s.confirm() // b not probed yet
	if !s.Snapshot()["self"] {
		t.Fatal("confirmed before every peer was probed")
	}
	p.probed("b", false)
	s.confirm()
	if !s.Snapshot()["self"] {
		t.Fatal("confirmed though b did not answer")
	}
	// b saw annotations this node has not: this node waits for its cache.
	p.cache("b", 11)
	p.probed("b", true)
	s.confirm()
	if !s.Snapshot()["self"] {
		t.Fatal("confirmed by a peer whose cache is ahead")
	}
	r.cacheVersion.Store(11)
	eventually(t, "confirmed by the peers", func() bool { return !s.Snapshot()["self"] })
}

func TestNoPeerAnsweringConfirmsNothing(t *testing.T) {
	s, _, p, _ := newTest(t)
	s.SetPeers([]string{"a", "b"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.probed("a", false)
	p.probed("b", false)
	s.confirm()
	if !s.Snapshot()["self"] {
		t.Error("confirmed though no peer answered")
	}
	// No peers at all: no one could have taken anything over.
	s.SetPeers(nil)
	eventually(t, "confirmed without peers", func() bool { return !s.Snapshot()["self"] })
}

func TestPeerFoundDownWhileSilent(t *testing.T) {
	s, _, p, notified := newTest(t)
	s.SetPeers([]string{"a", "b"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	n := notified.Load()
	p.set("b", liveness.Up)
	p.set("a", liveness.Down)
	if got := s.Snapshot(); !got["a"] || got["b"] || notified.Load() != n+1 {
		t.Fatalf("a found down: down %v, notified %d times", downs(s), notified.Load()-n)
	}
	p.set("a", liveness.Down) // told again
	if notified.Load() != n+1 {
		t.Error("a peer already down notified again")
	}
	// Back up, it stays down until a ccm says otherwise.
	p.set("a", liveness.Up)
	if !s.Snapshot()["a"] {
		t.Error("a peer that came back was taken for up without a ccm")
	}
}

func TestPeerFoundDownWhileHeardIsIgnored(t *testing.T) {
	s, r, p, _ := newTest(t)
	s.SetPeers([]string{"a"})
	p.set("a", liveness.Down) // before any silence
	if s.Snapshot()["a"] {
		t.Fatalf("a peer found down with a ccm heard: down %v", downs(s))
	}
	// Silent, then heard again: the peers' word counts no more.
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	r.setHeard(true)
	eventually(t, "the peers no longer probed", func() bool { return p.running.Load() == 0 })
	p.set("a", liveness.Down)
	if s.Snapshot()["a"] {
		t.Errorf("a peer found down after a ccm was heard again: down %v", downs(s))
	}
}

func TestNewerVerdictClearsPeersFoundDown(t *testing.T) {
	s, r, p, _ := newTest(t)
	s.SetPeers([]string{"a", "b"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.set("a", liveness.Down)
	if !s.Snapshot()["a"] {
		t.Fatal("a not taken for down")
	}
	r.fromCCM(1, "b")
	if got := downs(s); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after a verdict of b: down %v, want b alone", got)
	}
}

// TestCoveredWhileSilentStandsDown checks an agent a peer stands in for while no ccm is
// heard, as after this node was cut off: it withdraws what that peer took (the plans that
// name it, see desired.ComputeOf) and says it stood down, so that two nodes do not
// announce one address, until a ccm's verdict says otherwise; it does not take itself for
// down as a whole, which would leave the Services the peer does not back up unanswered.
func TestCoveredWhileSilentStandsDown(t *testing.T) {
	s, r, p, _ := newTest(t)
	p.cover("a", "self") // a ccm heard: that is the ccm's to judge
	if len(s.CoveredBy()) != 0 {
		t.Fatal("covered with a ccm heard, taken as covered")
	}
	s.SetPeers([]string{"a"})
	run(t, s)
	eventually(t, "the peers probed", func() bool { return p.running.Load() == 1 })
	p.probed("a", true)
	eventually(t, "confirmed by the peers", func() bool { return !s.Snapshot()["self"] && !r.stoodDown() })
	p.set("a", liveness.Up) // a's next reply still says it covers this node
	if got := s.CoveredBy(); !slices.Equal(got, []string{"a"}) || !r.stoodDown() {
		t.Fatalf("covered by a while silent: covered by %v, stands down %v", got, r.stoodDown())
	}
	if s.Snapshot()["self"] || s.Snapshot()["a"] {
		t.Errorf("covered while silent: down %v, want no one", downs(s))
	}
	r.fromCCM(1)
	if len(s.CoveredBy()) != 0 || r.stoodDown() {
		t.Errorf("a verdict naming no one: covered by %v, stands down %v", s.CoveredBy(), r.stoodDown())
	}
}
