package speaker

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

func TestConflicts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	addr := netip.MustParseAddr("198.18.0.10")
	foreign := l2.Claim{Addr: addr, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xf0}, Kind: l2.ClaimAnnouncement}
	other := l2.Claim{Addr: addr, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xf1}, Kind: l2.ClaimReply}
	gained := t0.Add(-time.Hour)
	cs := newConflicts()
	count := func(o ClaimOutcome) uint64 { return cs.counts[iprange.IPv4][o] }

	now := t0
	if cs.first(foreign, now.Add(-takeoverSettle/2), false, false, now) || count(Takeover) != 1 {
		t.Errorf("a claim %v after gaining the address: waits or not counted as Takeover", takeoverSettle/2)
	}
	if cs.first(foreign, gained, true, false, now) || count(Moved) != 1 {
		t.Error("a claim of an address moving away (lingering): waits or not counted as Moved")
	}
	if cs.first(foreign, gained, false, true, now) || count(OwnInterface) != 1 {
		t.Error("a claim by another interface of the node: waits or not counted as OwnInterface")
	}
	if !cs.first(foreign, gained, false, false, now) {
		t.Fatal("a claim of an address held for an hour: does not wait for confirmation")
	}
	if cs.first(foreign, gained, false, false, now) {
		t.Error("a second claim while the first waits: waits too")
	}
	if !cs.first(other, gained, false, false, now) {
		t.Error("a claim by a second host: does not wait for confirmation")
	}
	if cs.confirm(other, false, now) || count(Moved) != 2 {
		t.Error("a claim confirmed after the address moved: reported, or not counted as Moved")
	}
	now = now.Add(confirmAfter)
	if !cs.confirm(foreign, true, now) || count(Reported) != 1 {
		t.Fatal("a claim confirmed while the node still announces the address: not reported")
	}
	if _, n := cs.stats(now); n != 1 {
		t.Errorf("conflicted addresses = %d, want 1", n)
	}
	if cs.first(foreign, gained, false, false, now.Add(conflictReportEvery/2)) || count(Repeated) != 1 {
		t.Error("the same claim within a minute of its report: waits, or not counted as Repeated")
	}
	later := now.Add(conflictReportEvery)
	if !cs.first(foreign, gained, false, false, later) {
		t.Error("the same claim a minute after its report: not reported again")
	}
	if _, n := cs.stats(later); n != 0 {
		t.Errorf("conflicted addresses a minute after the report = %d, want 0", n)
	}
}

func TestConflictsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := newConflicts()
	claim := func(i int) l2.Claim {
		return l2.Claim{Addr: netip.MustParseAddr("198.18.0.10"), MAC: net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}, Kind: l2.ClaimAnnouncement}
	}
	// A host that sends claims from ever new hardware addresses fills the pending set,
	// and no more.
	for i := range maxPendingClaims {
		if !cs.first(claim(i), t0.Add(-time.Hour), false, false, t0) {
			t.Fatalf("claim %d refused before the bound", i)
		}
	}
	if cs.first(claim(maxPendingClaims), t0.Add(-time.Hour), false, false, t0) || cs.counts[iprange.IPv4][Limited] != 1 {
		t.Fatal("a claim past maxPendingClaims: waits, or not counted as Limited")
	}
	if len(cs.pending) != maxPendingClaims {
		t.Errorf("pending = %d, want %d", len(cs.pending), maxPendingClaims)
	}
	for i := range maxPendingClaims {
		cs.confirm(claim(i), true, t0)
	}
	if len(cs.pending) != 0 || len(cs.reported) != maxPendingClaims {
		t.Errorf("after confirming: pending %d, reported %d; want 0, %d", len(cs.pending), len(cs.reported), maxPendingClaims)
	}
}
