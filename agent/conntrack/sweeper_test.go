package conntrack

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// fakeTable is a connection tracking table in memory.
type fakeTable struct {
	entries []Entry
	passes  []iprange.Family
	err     error
}

func (f *fakeTable) add(e Entry) {
	e.raw = []byte(fmt.Sprint(len(f.entries), e))
	f.entries = append(f.entries, e)
}

func (f *fakeTable) Unanswered(family iprange.Family, fn func(Entry)) error {
	f.passes = append(f.passes, family)
	if f.err != nil {
		return f.err
	}
	for _, e := range f.entries {
		if family == iprange.FamilyOf(e.Dst.Addr()) {
			fn(e)
		}
	}
	return nil
}

func (f *fakeTable) Delete(_ iprange.Family, e Entry) (bool, error) {
	n := len(f.entries)
	f.entries = slices.DeleteFunc(f.entries, func(x Entry) bool { return bytes.Equal(x.raw, e.raw) })
	return len(f.entries) < n, nil
}

var (
	v4 = netip.MustParseAddr("198.18.0.100")
	v6 = netip.MustParseAddr("fd00:198:18::100")
)

// TestSweeperClearsGained: a gained address's stale entries are cleared a second after the
// gain, one pass per family; the entries of other addresses and the translated ones stay.
func TestSweeperClearsGained(t *testing.T) {
	table := &fakeTable{}
	for _, e := range []Entry{
		entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_SENT),
		entry("198.18.0.100", "198.19.3.2", 8080, nl.TCP_CONNTRACK_SYN_SENT),
		entry("198.18.0.101", "198.18.0.101", 8080, nl.TCP_CONNTRACK_SYN_SENT),
		entry("fd00:198:18::100", "fd00:198:18::100", 8080, nl.TCP_CONNTRACK_SYN_SENT),
	} {
		table.add(e)
	}
	s := NewSweeper(table)
	s.Gained([]netip.Addr{v4, v6})
	gained := time.Now()
	if next := s.sweepDue(gained); len(table.passes) != 0 || next.Before(gained.Add(firstSweep-slack)) {
		t.Fatalf("at the gain: %d passes, next at +%v; want none, and the first a second later", len(table.passes), next.Sub(gained))
	}
	s.sweepDue(gained.Add(firstSweep))
	if want := []iprange.Family{iprange.IPv4, iprange.IPv6}; !sameFamilies(table.passes, want) {
		t.Errorf("passes a second after the gain: %v, want one of each family %v", table.passes, want)
	}
	want := []string{"198.18.0.100:8080 -> 198.19.3.2:8080", "198.18.0.101:8080 -> 198.18.0.101:8080"}
	if got := left(table.entries); !slices.Equal(got, want) {
		t.Errorf("entries left: %v, want %v", got, want)
	}
}

// TestSweeperSchedule: the sweeps of an address come at doubling intervals and end once it
// has been the node's for a minute and a sweep finds nothing; while every sweep finds
// entries, they go on.
func TestSweeperSchedule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		poisoned bool // a new stale entry before every sweep
		want     []time.Duration
	}{
		{"nothing found", false, []time.Duration{1, 3, 7, 15, 31, 47, 63}},
		{"entries keep coming", true, []time.Duration{1, 3, 7, 15, 31, 47, 63, 79, 95}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := &fakeTable{}
			s := NewSweeper(table)
			s.Gained([]netip.Addr{v4})
			gained := time.Now()
			var got []time.Duration
			for next := s.sweepDue(gained); !next.IsZero() && len(got) < len(tc.want); {
				if tc.poisoned {
					table.add(entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_SENT))
				}
				got = append(got, next.Sub(gained).Round(time.Second)/time.Second)
				next = s.sweepDue(next)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("sweeps at %v s after the gain, want %v", got, tc.want)
			}
			if !tc.poisoned && len(s.watches) != 0 {
				t.Errorf("still watching %v after the last sweep", s.watches)
			}
		})
	}
}

// TestSweeperRegained: an address gained again while under watch starts its sweeps over.
func TestSweeperRegained(t *testing.T) {
	table := &fakeTable{}
	s := NewSweeper(table)
	s.Gained([]netip.Addr{v4})
	start := time.Now()
	next := s.sweepDue(start.Add(31 * time.Second)) // the 1 s, 3 s, ... sweeps in one
	s.Gained([]netip.Addr{v4})
	if again := s.sweepDue(time.Now()); !again.Before(next) || time.Until(again) > firstSweep {
		t.Errorf("after the second gain the next sweep is at %v, want within a second", time.Until(again))
	}
}

// TestSweeperOffWithoutPermission: without CAP_NET_ADMIN the first pass fails with EPERM
// and the sweeper stops: no more passes, no addresses kept.
func TestSweeperOffWithoutPermission(t *testing.T) {
	table := &fakeTable{err: fmt.Errorf("netlink: %w", unix.EPERM)}
	s := NewSweeper(table)
	s.Gained([]netip.Addr{v4})
	if next := s.sweepDue(time.Now().Add(firstSweep)); !next.IsZero() {
		t.Errorf("next sweep after EPERM at %v, want none", next)
	}
	s.Gained([]netip.Addr{v4})
	if next := s.sweepDue(time.Now().Add(firstSweep)); !next.IsZero() || len(table.passes) != 1 {
		t.Errorf("after EPERM and a new gain: next %v, %d passes; want none and the one that failed", next, len(table.passes))
	}
}

func sameFamilies(got, want []iprange.Family) bool {
	got = slices.Clone(got)
	slices.Sort(got)
	return slices.Equal(got, want)
}

// left is the destination and reply source of each entry.
func left(entries []Entry) []string {
	var s []string
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%s -> %s", e.Dst, e.ReplySrc))
	}
	return s
}
