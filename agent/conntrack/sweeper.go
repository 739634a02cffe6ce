package conntrack

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// The sweeps of an address: the first a second after the node gains it, when kube-proxy,
// which writes its rules at most once a second by default, has most likely caught up;
// then at doubling intervals up to maxStep, until the address has been the node's for
// window and the last sweep found nothing. While sweeps keep finding entries (the data
// plane has not caught up) they go on, every maxStep.
const (
	firstSweep = time.Second
	maxStep    = 16 * time.Second
	window     = time.Minute
	// slack merges sweeps due within it into one: the addresses of a takeover, gained a
	// few at a time, cost one pass over the table each time, not one per address.
	slack = 200 * time.Millisecond
)

// Table is the connection tracking a Sweeper clears: Kernel, the node's.
type Table interface {
	// Unanswered calls f with each entry of family that has seen no reply and whose
	// destination is not translated, and perhaps others.
	Unanswered(family iprange.Family, f func(Entry)) error
	// Delete deletes e, read from family's table, and reports whether it did: not if it
	// is gone or another entry took its tuple since.
	Delete(family iprange.Family, e Entry) (bool, error)
}

// A Sweeper clears the stale entries (see Stale) of the addresses a node gains, a few
// times over the minute after each gain.
type Sweeper struct {
	table Table

	mu      sync.Mutex
	watches map[netip.Addr]*watch
	off     bool // the agent may not change the table
	wake    chan struct{}
}

// A watch is the sweeping of one address since the node gained it.
type watch struct {
	since, next time.Time
	step        time.Duration
}

// newWatch returns the watch of an address gained at now.
func newWatch(now time.Time) *watch {
	return &watch{since: now, next: now.Add(firstSweep), step: firstSweep}
}

// swept moves w on after a sweep at now that found found of its entries, and reports
// whether its address is to be swept again.
func (w *watch) swept(now time.Time, found int) bool {
	if found == 0 && now.Sub(w.since) >= window {
		return false
	}
	w.step = min(2*w.step, maxStep)
	w.next = now.Add(w.step)
	return true
}

var (
	sweeps = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "baremetal_agent",
		Name:           "conntrack_sweeps_total",
		Help:           "Passes over the node's connection tracking (one per address family) for entries of addresses the node gained, tracked untranslated and never answered.",
		StabilityLevel: metrics.ALPHA,
	})
	sweepErrors = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "baremetal_agent",
		Name:           "conntrack_sweep_errors_total",
		Help:           "Passes over the node's connection tracking that failed, in part or whole; the first without CAP_NET_ADMIN turns sweeping off until the agent restarts.",
		StabilityLevel: metrics.ALPHA,
	})
	cleared = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "baremetal_agent",
		Name:           "conntrack_entries_cleared_total",
		Help:           "TCP connection-tracking entries cleared because the node tracked them untranslated to an address it announces: SYNs that came before the node's Service rules, which would have kept the connection's retries failing.",
		StabilityLevel: metrics.ALPHA,
	})
)

// Metrics returns the collectors of this package, to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{sweeps, sweepErrors, cleared}
}

// NewSweeper returns a Sweeper of table.
func NewSweeper(table Table) *Sweeper {
	return &Sweeper{table: table, watches: map[netip.Addr]*watch{}, wake: make(chan struct{}, 1)}
}

// Gained starts the sweeps of addrs, which the node has just begun to announce, again if
// already under way. It does not block.
func (s *Sweeper) Gained(addrs []netip.Addr) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return
	}
	for _, a := range addrs {
		s.watches[a] = newWatch(now)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sweeps as the gained addresses come due, until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if next := s.sweepDue(time.Now()); !next.IsZero() {
			timer.Reset(time.Until(next))
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-due:
		}
	}
}

// sweepDue sweeps the addresses due by now, and returns when the next one is due: zero
// for none.
func (s *Sweeper) sweepDue(now time.Time) time.Time {
	s.mu.Lock()
	due := map[*watch]netip.Addr{}
	byFamily := map[iprange.Family]map[netip.Addr]bool{}
	for a, w := range s.watches {
		if w.next.After(now.Add(slack)) {
			continue
		}
		due[w] = a
		f := iprange.FamilyOf(a)
		if byFamily[f] == nil {
			byFamily[f] = map[netip.Addr]bool{}
		}
		byFamily[f][a] = true
	}
	s.mu.Unlock()

	found := map[netip.Addr]int{}
	for family, addrs := range byFamily {
		if err := s.sweep(family, addrs, found); errors.Is(err, unix.EPERM) {
			klog.ErrorS(err, "Cannot change the node's connection tracking; not clearing the entries of connections that came before kube-proxy's rules of an address, whose retries then keep failing. Give the agent CAP_NET_ADMIN, or run it with --sweep-conntrack=false")
			s.mu.Lock()
			defer s.mu.Unlock()
			s.off = true
			clear(s.watches)
			return time.Time{}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for a, w := range s.watches {
		// One gained again meanwhile has a new watch: its sweeps start over.
		if addr, ok := due[w]; ok && !w.swept(now, found[addr]) {
			delete(s.watches, a)
			continue
		}
		if next.IsZero() || w.next.Before(next) {
			next = w.next
		}
	}
	return next
}

// sweep clears the stale entries of addrs, of one family, adding what it found of each to
// found.
func (s *Sweeper) sweep(family iprange.Family, addrs map[netip.Addr]bool, found map[netip.Addr]int) error {
	start := time.Now()
	var stale []Entry
	err := s.table.Unanswered(family, func(e Entry) {
		if a, ok := Stale(e); ok && addrs[a] {
			e.raw = bytes.Clone(e.raw)
			stale = append(stale, e)
		}
	})
	var n int
	for _, e := range stale {
		deleted, derr := s.table.Delete(family, e)
		if deleted {
			n++
			found[e.Dst.Addr().Unmap()]++
		}
		err = errors.Join(err, derr)
	}
	sweeps.Inc()
	if err != nil {
		sweepErrors.Inc()
		if !errors.Is(err, unix.EPERM) {
			klog.ErrorS(err, "Clearing untranslated connection-tracking entries of gained addresses", "family", family, "cleared", n)
		}
	}
	cleared.Add(float64(n))
	if n > 0 {
		klog.InfoS("Cleared connection-tracking entries of connections that reached this node before its Service rules for an address", "family", family, "cleared", n, "addresses", len(addrs), "took", time.Since(start))
	}
	return err
}
