package speaker

import (
	"container/heap"
	"context"
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// refreshGranularity is the least time between two wake-ups of the refresh loop: the
// refreshes due within it go out together, so that thousands of addresses cost at most a
// hundred wake-ups a second, and none comes more than this late.
const refreshGranularity = 10 * time.Millisecond

// target is what is refreshed: one address on one interface.
type target struct {
	link string
	addr netip.Addr
}

// refreshEntry is a target's place in a schedule.
type refreshEntry struct {
	target
	// quiet is when the announcements that followed gaining the address end: the refreshes
	// come after them, never among them.
	quiet time.Time
	due   time.Time
	// idx is the entry's place in the heap, -1 while it is not in it (refresh off).
	idx int
}

// schedule says when each announced address is announced again: once per interval, each
// at its own phase of the interval (from a hash of the address and interface), so that
// thousands of addresses, gained at once in a failover, do not go out in one burst; the
// first time after the announcements that followed gaining it, so that the gap between
// two announcements of an address is never more than an interval. It is pure: the caller
// gives it the time. Not safe for concurrent use.
type schedule struct {
	// interval is the time between two refreshes of an address; 0 turns them off, while
	// the addresses are still tracked, for when they are turned on again.
	interval time.Duration
	// epoch is the origin of the phases.
	epoch   time.Time
	entries map[target]*refreshEntry
	heap    refreshHeap
}

func newSchedule(epoch time.Time) *schedule {
	return &schedule{epoch: epoch, entries: map[target]*refreshEntry{}}
}

// setInterval makes d the time between two refreshes, 0 for none, from now on.
func (s *schedule) setInterval(d time.Duration, now time.Time) {
	if d == s.interval {
		return
	}
	s.interval = d
	for _, e := range s.heap {
		e.idx = -1
	}
	s.heap = s.heap[:0]
	if d <= 0 {
		return
	}
	for _, e := range s.entries {
		e.due = s.first(e, now)
		e.idx = len(s.heap)
		s.heap = append(s.heap, e)
	}
	heap.Init(&s.heap)
}

// first returns the first time e is due from now on: at its phase, after its quiet time.
func (s *schedule) first(e *refreshEntry, now time.Time) time.Time {
	from := now
	if e.quiet.After(now) {
		from = e.quiet
	}
	phase := cycle.Phase(e.addr.String()+"%"+e.link, s.interval)
	return cycle.Next(s.epoch, from, phase, s.interval)
}

// gained tells the schedule that t was just gained and is announced until quiet: its
// refreshes start anew after that.
func (s *schedule) gained(t target, quiet, now time.Time) {
	e := s.entries[t]
	if e == nil {
		e = &refreshEntry{target: t, idx: -1}
		s.entries[t] = e
	}
	e.quiet = quiet
	s.place(e, now)
}

// keep tells the schedule that t is announced: refreshed from now on, unless it already
// is.
func (s *schedule) keep(t target, now time.Time) {
	if s.entries[t] == nil {
		s.gained(t, now, now)
	}
}

// place puts e at its first time due from now on, if refreshes are on.
func (s *schedule) place(e *refreshEntry, now time.Time) {
	if s.interval <= 0 {
		return
	}
	e.due = s.first(e, now)
	if e.idx < 0 {
		heap.Push(&s.heap, e)
	} else {
		heap.Fix(&s.heap, e.idx)
	}
}

// drop stops refreshing t: it is no longer announced.
func (s *schedule) drop(t target) {
	e := s.entries[t]
	if e == nil {
		return
	}
	delete(s.entries, t)
	if e.idx >= 0 {
		heap.Remove(&s.heap, e.idx)
	}
}

// next returns when the first refresh is due, and false when none is.
func (s *schedule) next() (time.Time, bool) {
	if len(s.heap) == 0 {
		return time.Time{}, false
	}
	return s.heap[0].due, true
}

// due returns the targets due by now, and puts each at its next time, an interval on.
func (s *schedule) due(now time.Time) []target {
	var out []target
	for len(s.heap) > 0 && !s.heap[0].due.After(now) {
		e := s.heap[0]
		out = append(out, e.target)
		e.due = e.due.Add(s.interval)
		if e.due.Before(now) {
			// Intervals were missed (a suspended machine, a stalled process): one refresh
			// for them all, and back to the entry's phase.
			e.due = s.first(e, now)
		}
		heap.Fix(&s.heap, 0)
	}
	return out
}

// refreshHeap orders entries by the time they are due.
type refreshHeap []*refreshEntry

func (h refreshHeap) Len() int           { return len(h) }
func (h refreshHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h refreshHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *refreshHeap) Push(x any) {
	e := x.(*refreshEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}

func (h *refreshHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// SetRefresh makes d the time between two announcements of every address the node
// announces, after the announcements that follow gaining it; 0 turns them off. Until it
// is called there are none, and after Drain there are none again.
func (s *Speaker) SetRefresh(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining || d == s.refreshes.interval {
		return
	}
	klog.InfoS("Announcement refresh", "interval", d, "off", d <= 0)
	s.changeRefreshes(func(now time.Time) { s.refreshes.setInterval(d, now) })
}

// Drain stops the refreshes for good, as the agent drains: its addresses are about to
// move, and a refresh sent in the moment between a move and this agent learning of it
// would draw clients back from the new announcer. Addresses gained meanwhile are still
// announced when gained.
func (s *Speaker) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	if s.refreshes.interval > 0 {
		klog.V(2).InfoS("Draining: no more announcement refreshes")
	}
	s.refreshes.setInterval(0, time.Now())
}

// changeRefreshes applies change to the schedule, and wakes the refresh loop if a refresh
// is due sooner than it was. s.mu is held.
func (s *Speaker) changeRefreshes(change func(now time.Time)) {
	before, had := s.refreshes.next()
	change(time.Now())
	if after, ok := s.refreshes.next(); ok && (!had || after.Before(before)) {
		select {
		case s.refreshWake <- struct{}{}:
		default:
		}
	}
}

// scheduleRefreshes tells the schedule about the addresses of the responder on link:
// gained ones start anew after the announcements that follow gaining them (until
// quiet); lingering ones, which moved away, are never refreshed. s.mu is held.
func (s *Speaker) scheduleRefreshes(link string, addrs []netip.Addr, gained map[netip.Addr]bool, lingering map[netip.Addr]bool, quiet time.Time) {
	s.changeRefreshes(func(now time.Time) {
		for _, a := range addrs {
			t := target{link, a}
			switch {
			case lingering[a]:
				s.refreshes.drop(t)
			case gained[a]:
				s.refreshes.gained(t, quiet, now)
			default:
				s.refreshes.keep(t, now)
			}
		}
	})
}

// refreshLoop sends the refreshes as they come due, until ctx ends. Each goes out only if
// the address is still announced at that moment: owned, and not moved away.
func (s *Speaker) refreshLoop(ctx context.Context) {
	type send struct {
		r    *responder
		addr netip.Addr
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var sends []send
		for _, t := range s.refreshes.due(time.Now()) {
			if r := s.responders[respKey{t.link, iprange.FamilyOf(t.addr)}]; r != nil {
				sends = append(sends, send{r, t.addr})
			}
		}
		next, ok := s.refreshes.next()
		s.mu.Unlock()
		for _, x := range sends {
			if !x.r.announces(x.addr) {
				continue
			}
			if err := x.r.Reannounce(x.addr); err != nil {
				klog.ErrorS(err, "Cannot refresh the announcement of an address", "address", x.addr)
			}
		}
		var wait <-chan time.Time
		if ok {
			timer.Reset(max(time.Until(next), refreshGranularity))
			wait = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-s.refreshWake:
		case <-wait:
		}
	}
}
