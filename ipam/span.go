package ipam

import (
	"math/big"
	"net/netip"
	"slices"

	"github.com/google/btree"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// span is the addresses of one family in one pool, and finds the lowest free one without
// ever enumerating the pool. Every usable address below the cursor is either taken or a
// hole; addresses at or above it may be taken by reservations, which the cursor steps over.
// So the cost of a lookup grows with what is allocated, never with the pool's size.
type span struct {
	pool      *pool
	ranges    []iprange.Range // sorted, disjoint
	avoidEdge bool            // skip the addresses iprange.IsBuggyIPv4 reports
	size      *big.Int
	used      int

	rng    int        // index of the range the cursor is in; len(ranges) once past the end
	cursor netip.Addr // next address never handed out or stepped over
	holes  *btree.BTreeG[netip.Addr]
}

func newSpan(p *pool, ranges []iprange.Range, avoidEdge bool) *span {
	ranges = slices.Clone(ranges)
	slices.SortFunc(ranges, func(a, b iprange.Range) int { return a.First.Compare(b.First) })
	size := new(big.Int)
	for _, r := range ranges {
		size.Add(size, r.Size())
		if avoidEdge {
			size.Sub(size, big.NewInt(r.BuggyIPv4Count()))
		}
	}
	s := &span{
		pool:      p,
		ranges:    ranges,
		avoidEdge: avoidEdge,
		size:      size,
		holes:     btree.NewG(32, netip.Addr.Less),
	}
	if len(ranges) > 0 {
		s.cursor = ranges[0].First
	}
	return s
}

// usable reports whether the allocator may hand a out on its own.
func (s *span) usable(a netip.Addr) bool {
	return !s.avoidEdge || !iprange.IsBuggyIPv4(a)
}

// next returns the lowest address that taken does not report, and moves the cursor past it.
// The caller must record the address as taken.
func (s *span) next(taken func(netip.Addr) bool) (netip.Addr, bool) {
	if a, ok := s.holes.DeleteMin(); ok {
		return a, true
	}
	for s.rng < len(s.ranges) {
		a := s.cursor
		if a == s.ranges[s.rng].Last {
			s.rng++
			if s.rng < len(s.ranges) {
				s.cursor = s.ranges[s.rng].First
			}
		} else {
			s.cursor = a.Next()
		}
		if s.usable(a) && !taken(a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// below reports whether the cursor has already passed a.
func (s *span) below(a netip.Addr) bool {
	return s.rng >= len(s.ranges) || a.Less(s.cursor)
}

// take records that a, an address of the span, is now in use.
func (s *span) take(a netip.Addr) {
	s.used++
	if s.below(a) {
		s.holes.Delete(a)
	}
}

// free records that a is no longer in use.
func (s *span) free(a netip.Addr) {
	s.used--
	if s.below(a) && s.usable(a) {
		s.holes.ReplaceOrInsert(a)
	}
}

// contains reports whether a lies in the span.
func (s *span) contains(a netip.Addr) bool {
	i, found := slices.BinarySearchFunc(s.ranges, a, func(r iprange.Range, a netip.Addr) int { return r.First.Compare(a) })
	if found {
		return true
	}
	return i > 0 && s.ranges[i-1].Contains(a)
}
