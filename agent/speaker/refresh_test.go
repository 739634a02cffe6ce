package speaker

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// epoch is the fake clock's origin; the schedule's phases count from it.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at is epoch plus d, the fake clock's reading.
func at(d time.Duration) time.Time { return epoch.Add(d) }

// run plays the refresh loop on a fake clock from from to until, jumping from one due
// refresh to the next, and returns the times each target was refreshed.
func run(s *schedule, from, until time.Time) map[target][]time.Time {
	sent := map[target][]time.Time{}
	now := from
	for !now.After(until) {
		for _, t := range s.due(now) {
			sent[t] = append(sent[t], now)
		}
		next, ok := s.next()
		if !ok {
			break
		}
		now = next
	}
	return sent
}

func addrN(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
}

// TestScheduleOnePerInterval follows one address from its gain: nothing during the
// announcements that follow it, then exactly one refresh per interval, the first no more
// than an interval after those announcements end.
func TestScheduleOnePerInterval(t *testing.T) {
	const interval = 10 * time.Second
	const burst = 2 * time.Second
	for i := range 50 {
		tg := target{"eth0", addrN(i)}
		s := newSchedule(epoch)
		s.setInterval(interval, epoch)
		gainedAt := at(time.Duration(i) * 1234567 * time.Microsecond) // all over the cycle
		s.gained(tg, gainedAt.Add(burst), gainedAt)
		got := run(s, gainedAt, gainedAt.Add(burst+10*interval))[tg]
		if len(got) != 10 {
			t.Fatalf("%v: %d refreshes in the 10 intervals after the burst, want 10: %v", tg, len(got), got)
		}
		if first := got[0].Sub(gainedAt); first <= burst || first > burst+interval {
			t.Errorf("%v: first refresh %v after the gain, want after the burst (%v) and at most an interval after it", tg, first, burst)
		}
		for j := 1; j < len(got); j++ {
			if gap := got[j].Sub(got[j-1]); gap != interval {
				t.Errorf("%v: refreshes %d and %d %v apart, want %v", tg, j-1, j, gap, interval)
			}
		}
	}
}

// TestScheduleSpreads gains 5,000 addresses at once, as a failover does: their refreshes
// are spread over the interval, no tenth of it holding more than a fifth above its share.
func TestScheduleSpreads(t *testing.T) {
	const interval = time.Minute
	s := newSchedule(epoch)
	s.setInterval(interval, epoch)
	gained := at(17 * time.Second)
	for i := range 5000 {
		s.gained(target{"eth0", addrN(i)}, gained.Add(2*time.Second), gained)
	}
	// One whole interval, from the end of the burst.
	start := gained.Add(2 * time.Second)
	var tenths [10]int
	for tg, times := range run(s, start, start.Add(interval-1)) {
		if len(times) != 1 {
			t.Fatalf("%v refreshed %d times in one interval, want once", tg, len(times))
		}
		tenths[times[0].Sub(start)*10/interval]++
	}
	for i, n := range tenths {
		if n < 400 || n > 600 {
			t.Errorf("tenth %d of the interval holds %d of 5,000 refreshes, want about 500: %v", i, n, tenths)
		}
	}
}

// TestScheduleOff checks that an interval of 0 refreshes nothing, while the addresses are
// still known for when refreshes are turned on again.
func TestScheduleOff(t *testing.T) {
	a, b := target{"eth0", addrN(1)}, target{"eth1", addrN(2)}
	s := newSchedule(epoch)
	s.gained(a, at(2*time.Second), at(0))
	s.keep(b, at(0))
	if next, ok := s.next(); ok {
		t.Fatalf("refreshes off: next refresh at %v", next)
	}
	if got := run(s, at(0), at(time.Hour)); len(got) > 0 {
		t.Fatalf("refreshes off: sent %v", got)
	}

	s.setInterval(time.Second, at(time.Hour))
	got := run(s, at(time.Hour), at(time.Hour+10*time.Second-1))
	if len(got[a]) != 10 || len(got[b]) != 10 {
		t.Errorf("turned on: %d and %d refreshes in 10 s, want 10 each", len(got[a]), len(got[b]))
	}

	s.setInterval(0, at(2*time.Hour))
	if next, ok := s.next(); ok {
		t.Errorf("turned off again: next refresh at %v", next)
	}
}

// TestScheduleDrop checks that a dropped address, one no longer announced, is never
// refreshed again, and that the others are not disturbed.
func TestScheduleDrop(t *testing.T) {
	const interval = time.Second
	s := newSchedule(epoch)
	s.setInterval(interval, epoch)
	var all []target
	for i := range 100 {
		tg := target{"eth0", addrN(i)}
		all = append(all, tg)
		s.keep(tg, epoch)
	}
	run(s, epoch, at(5*time.Second))
	for _, tg := range all[:50] {
		s.drop(tg)
	}
	s.drop(target{"eth9", addrN(1)}) // never known: nothing happens
	got := run(s, at(5*time.Second+1), at(15*time.Second))
	for i, tg := range all {
		want := 10
		if i < 50 {
			want = 0
		}
		if len(got[tg]) != want {
			t.Errorf("%v: %d refreshes after the drop, want %d", tg, len(got[tg]), want)
		}
	}
}

// TestScheduleGainedAgain checks that an address gained again (its interface came back)
// starts anew after its new burst, and that keep leaves a known address where it is.
func TestScheduleGainedAgain(t *testing.T) {
	const interval = 10 * time.Second
	tg := target{"eth0", addrN(7)}
	s := newSchedule(epoch)
	s.setInterval(interval, epoch)
	s.gained(tg, at(2*time.Second), epoch)
	first, _ := s.next()
	s.keep(tg, at(time.Second))
	if again, _ := s.next(); !again.Equal(first) {
		t.Errorf("keep moved the refresh from %v to %v", first, again)
	}

	run(s, epoch, first)
	// Gained again just before its next refresh, with a burst of 2 s: the next refresh
	// comes after that burst.
	regained := first.Add(interval - time.Second)
	s.gained(tg, regained.Add(2*time.Second), regained)
	next, _ := s.next()
	if !next.After(regained.Add(2*time.Second)) || next.After(regained.Add(2*time.Second+interval)) {
		t.Errorf("regained at %v: next refresh %v, want within an interval after its burst", regained.Sub(epoch), next.Sub(epoch))
	}
}

// TestScheduleLate checks that a loop that wakes intervals late (a suspended machine)
// sends one refresh, not one per missed interval, and goes back to the address's phase.
func TestScheduleLate(t *testing.T) {
	const interval = time.Second
	tg := target{"eth0", addrN(3)}
	s := newSchedule(epoch)
	s.setInterval(interval, epoch)
	s.keep(tg, epoch)
	first, _ := s.next()
	late := first.Add(10*interval + interval/3)
	if got := s.due(late); len(got) != 1 {
		t.Fatalf("woken 10 intervals late: %d refreshes due, want 1", len(got))
	}
	next, _ := s.next()
	if !next.After(late) || next.Sub(late) > interval || next.Sub(first)%interval != 0 {
		t.Errorf("woken at %v: next refresh at %v, want the phase of %v within the next interval", late.Sub(epoch), next.Sub(epoch), first.Sub(epoch))
	}
}

// TestScheduleNewInterval checks that a new interval, as a reloaded cloud-config sets,
// takes effect at once for every address.
func TestScheduleNewInterval(t *testing.T) {
	s := newSchedule(epoch)
	s.setInterval(time.Minute, epoch)
	var all []target
	for i := range 20 {
		tg := target{fmt.Sprintf("eth%d", i%2), addrN(i)}
		all = append(all, tg)
		s.keep(tg, epoch)
	}
	s.setInterval(time.Second, at(30*time.Second))
	got := run(s, at(30*time.Second), at(40*time.Second-1))
	for _, tg := range all {
		if n := len(got[tg]); n != 10 {
			t.Errorf("%v: %d refreshes in the 10 s after the interval became 1 s, want 10", tg, n)
		}
	}
}

// TestScheduleRefreshesLingeringNever checks what the speaker schedules for the
// addresses of a responder: gained ones after their burst, kept ones, and never one that
// moved away and lingers while the node drains.
func TestScheduleRefreshesLingeringNever(t *testing.T) {
	s := New(Options{})
	s.SetRefresh(time.Second)
	kept, gained, moved := addrN(1), addrN(2), addrN(3)
	addrs := []netip.Addr{kept, gained, moved}
	s.mu.Lock()
	s.refreshes.keep(target{"eth0", kept}, time.Now())
	s.refreshes.keep(target{"eth0", moved}, time.Now())
	// Drain the wake-up of the changes above, to see the one below.
	select {
	case <-s.refreshWake:
	default:
	}
	quiet := time.Now().Add(time.Hour)
	s.scheduleRefreshes("eth0", addrs, map[netip.Addr]bool{gained: true}, map[netip.Addr]bool{moved: true}, quiet)
	entries := s.refreshes.entries
	s.mu.Unlock()
	if e := entries[target{"eth0", moved}]; e != nil {
		t.Errorf("an address that moved away is still refreshed, next at %v", e.due)
	}
	if e := entries[target{"eth0", gained}]; e == nil || !e.due.After(quiet) {
		t.Errorf("a gained address is refreshed at %+v, want after its burst (%v)", e, quiet)
	}
	if e := entries[target{"eth0", kept}]; e == nil {
		t.Error("a kept address is not refreshed")
	}
	// The gained address is due later than the kept one: the loop needs no wake-up.
	select {
	case <-s.refreshWake:
		t.Error("the refresh loop was woken though nothing is due sooner")
	default:
	}
	s.SetRefresh(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if next, ok := s.refreshes.next(); ok {
		t.Errorf("refresh turned off, next at %v", next)
	}
}

// TestDrainStopsRefreshes checks that a draining speaker refreshes nothing, even when a
// reloaded cloud-config sets an interval again.
func TestDrainStopsRefreshes(t *testing.T) {
	s := New(Options{})
	s.SetRefresh(time.Second)
	s.mu.Lock()
	s.refreshes.keep(target{"eth0", addrN(1)}, time.Now())
	s.mu.Unlock()
	s.Drain()
	s.SetRefresh(2 * time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if next, ok := s.refreshes.next(); ok {
		t.Errorf("draining, next refresh at %v", next)
	}
}
