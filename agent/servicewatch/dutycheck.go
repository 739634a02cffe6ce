package servicewatch

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// DutyTolerance is how long the agent's own view may differ from the ccm's duty before
// it announces only what the duty confirms: long enough for a watch event to reach this
// agent after the ccm's cache, short enough that an agent cut off from the API server
// stops answering for an address given to another node within a second.
const DutyTolerance = 500 * time.Millisecond

// Duties is what the watcher needs of the probe responder: what the ccm expects this
// agent to announce, and where it says what the agent's own view is. A *responder.Responder.
type Duties interface {
	// Expected returns the duty digest of the newest ccm request, if that ccm knew one.
	Expected() (probe.Digest, bool)
	// Duty returns the newest duty list taken, or nil.
	Duty() *probe.Duty
	// LastCCM returns when a ccm was last heard, and SilentAfter how long after that it
	// is taken for silent.
	LastCCM() time.Time
	SilentAfter() time.Duration
	// SetView sets what the replies say of the agent's own view.
	SetView(digest probe.Digest, confirmedOnly bool)
	// OnDuty registers a function called after every duty list taken.
	OnDuty(func())
	// OnExpected registers a function called whenever Expected changes.
	OnExpected(func())
}

var confirmedOnlyGauge = metrics.NewGauge(&metrics.GaugeOpts{
	Subsystem:      "baremetal_agent",
	Name:           "confirmed_only",
	Help:           "1 while the agent announces only what the ccm's duty confirms: its own view of the Services has differed from the ccm's for longer than the tolerance, or its Service watch is broken.",
	StabilityLevel: metrics.ALPHA,
})

var vacantTakeovers = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      "baremetal_agent",
	Name:           "vacant_takeovers_total",
	Help:           "Addresses taken over before the tolerance for a view that differs from the ccm's ran out, because the ccm's duty gives them to this node and the announcer the cached plans name is down.",
	StabilityLevel: metrics.ALPHA,
})

// dutyCheck is the state of the comparison of the agent's own view with the ccm's duty.
type dutyCheck struct {
	mu            sync.Mutex
	digest        probe.Digest // of the own view, last sync
	mismatchSince time.Time    // zero while the views agree
	confirmedOnly bool
	vacated       map[netip.Addr]bool // announced before the tolerance ran out, last sync
}

// pokeDuty makes watchDuty look at once.
func (w *Watcher) pokeDuty() {
	select {
	case w.dutyWake <- struct{}{}:
	default:
	}
}

// expected returns the ccm's duty digest, if a ccm is heard that knows one.
func (w *Watcher) expected() (probe.Digest, bool) {
	if w.duties == nil || time.Since(w.duties.LastCCM()) > w.duties.SilentAfter() {
		return 0, false
	}
	return w.duties.Expected()
}

// confirm returns what the agent announces, given its own view own: all of it while it
// agrees with the ccm's duty, or while no duty is known; else, once the views have
// differed for DutyTolerance or at once when the Service watch is broken, what the duty
// confirms of what the cached Services hold, and before that own with what the duty adds
// of the vacant addresses (desired.Tolerated). cached, called only when the views differ
// and the duty lists an address own lacks or the tolerance ran out, returns what the
// cached Services hold and which of their addresses are vacant.
func (w *Watcher) confirm(own []desired.Address, cached func() (held []desired.Address, vacant func(netip.Addr) bool)) []desired.Address {
	if w.duties == nil {
		return own
	}
	digest := desired.Digest(own)
	expected, known := w.expected()
	_, broken := w.WatchBroken()
	w.check.mu.Lock()
	defer w.check.mu.Unlock()
	w.check.digest = digest
	switch {
	case !known || digest == expected:
		w.check.mismatchSince = time.Time{}
	case w.check.mismatchSince.IsZero():
		w.check.mismatchSince = time.Now()
	}
	mismatch := !w.check.mismatchSince.IsZero()
	if !mismatch {
		w.check.vacated = nil
	}
	confirmedOnly := mismatch && (broken || time.Since(w.check.mismatchSince) >= DutyTolerance)
	if confirmedOnly != w.check.confirmedOnly {
		klog.InfoS("Own view of the Services differs from the ccm's", "node", w.node, "confirmedOnly", confirmedOnly, "since", w.check.mismatchSince, "watchBroken", broken, "digest", digest, "expected", expected)
		w.check.confirmedOnly = confirmedOnly
		confirmedOnlyGauge.Set(boolGauge(confirmedOnly))
	}
	w.duties.SetView(digest, confirmedOnly)
	w.pokeDuty()
	if !mismatch {
		return own
	}
	var duty []netip.Addr
	if d := w.duties.Duty(); d != nil {
		duty = d.Addrs
	}
	if !confirmedOnly && !addsTo(own, duty) {
		// The common mismatch, the own view ahead of the duty: nothing to take at once,
		// so no need to read every cached Service.
		w.check.vacated = nil
		return own
	}
	held, vacant := cached()
	if confirmedOnly {
		return desired.Confirmed(own, held, duty)
	}
	out, vacated := desired.Tolerated(own, held, duty, vacant)
	w.countVacated(vacated)
	return out
}

// addsTo reports whether duty lists an address that own does not.
func addsTo(own []desired.Address, duty []netip.Addr) bool {
	mine := make(map[netip.Addr]bool, len(own))
	for _, a := range own {
		mine[a.Addr] = true
	}
	for _, addr := range duty {
		if !mine[addr] {
			return true
		}
	}
	return false
}

// countVacated counts and logs the vacated addresses that no earlier sync announced
// before the tolerance ran out. Called with w.check.mu held.
func (w *Watcher) countVacated(vacated []desired.Address) {
	now := make(map[netip.Addr]bool, len(vacated))
	for _, a := range vacated {
		now[a.Addr] = true
		if !w.check.vacated[a.Addr] {
			klog.V(2).InfoS("Announcing at once an address the ccm's duty gives this node and the cached plans leave to a node down", "node", w.node, "address", a.Addr, "services", a.Services)
			vacantTakeovers.Inc()
		}
	}
	w.check.vacated = now
}

// watchDuty queues a sync whenever the comparison with the ccm's duty may come out
// otherwise: the ccm's digest changed, the tolerance ran out, the watch broke or healed.
// While the views agree, a ccm is heard and the watch works, only a new digest, a change
// of the watch's health or a sync can change that, and each wakes it (pokeDuty): an agent
// at rest does not wake for it at all, which on a node whose pods keep every core busy
// leaves its small share of the CPU to its answers. Otherwise it looks every
// DutyTolerance/10.
func (w *Watcher) watchDuty(ctx context.Context) {
	if w.duties == nil {
		return
	}
	step := DutyTolerance / 10
	timer := time.NewTimer(step)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w.dutyWake:
		}
		expected, known := w.expected()
		_, broken := w.WatchBroken()
		w.check.mu.Lock()
		mismatch := known && expected != w.check.digest
		stale := mismatch != !w.check.mismatchSince.IsZero() ||
			mismatch && !w.check.confirmedOnly && (broken || time.Since(w.check.mismatchSince) >= DutyTolerance) ||
			!mismatch && w.check.confirmedOnly
		steady := known && !mismatch && w.check.mismatchSince.IsZero() && !w.check.confirmedOnly && !broken
		w.check.mu.Unlock()
		if stale {
			w.queue.Add(everything)
		}
		if !steady || stale {
			timer.Reset(step)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
