package probe

import (
	"cmp"
	"maps"
	"slices"
)

// Gather puts an agent's list back together from the shares its replies carry. Its view
// of the list, Items, takes an item in as soon as a share carries it, and lets one go only
// once the shares of a later whole list have all arrived without it: a prober must not
// take a node for no longer covered, or a pool for announceable again, because this reply
// carried another share. A Gather is not safe for concurrent use.
type Gather[T comparable] struct {
	hash func(T) uint64
	cmp  func(a, b T) int
	max  int

	// whole is the last whole list gathered, sorted, and wholeSum its sum; known says
	// there is one.
	whole    []T
	wholeSum ListSum
	known    bool
	// extra are the items shares carried since, that whole does not hold.
	extra map[T]struct{}
	// got are the items of the list being gathered, whose sum is gotSum, and gotDigest
	// the digest of those got so far.
	got       map[T]struct{}
	gotSum    ListSum
	gotDigest uint64
	// items is the view: whole and extra, sorted.
	items []T
}

// NewCoverGather returns a Gather of the NodeTags of the nodes an agent stands in for.
func NewCoverGather() *Gather[uint64] {
	return &Gather[uint64]{hash: hashTag, cmp: cmp.Compare[uint64], max: MaxCovers}
}

// NewUnableGather returns a Gather of what an agent cannot announce.
func NewUnableGather() *Gather[Unable] {
	return &Gather[Unable]{hash: hashUnable, cmp: compareUnable, max: MaxUnable}
}

// Take takes a reply's share of the list and the list's sum, and reports whether Items
// changed. A share whose items do not make the list its sum says (mixed with another
// list's, or a liar's) is gathered again from the start; its items stay in the view until
// a whole list goes without them.
func (g *Gather[T]) Take(share []T, sum ListSum) bool {
	if g.known && sum == g.wholeSum {
		// Steady state: the list is the one known whole, and anything else seen is gone.
		g.got = nil
		if len(g.extra) == 0 {
			return false
		}
		g.extra = nil
		return g.refresh()
	}
	if g.got == nil || sum != g.gotSum {
		g.got, g.gotSum, g.gotDigest = map[T]struct{}{}, sum, 0
	}
	for _, x := range share {
		if _, ok := g.got[x]; !ok {
			g.got[x] = struct{}{}
			g.gotDigest ^= g.hash(x)
		}
		if _, found := slices.BinarySearchFunc(g.whole, x, g.cmp); !found {
			if g.extra == nil || len(g.extra) >= g.max {
				// Bounded even against an agent that never sends the same list twice.
				g.extra = map[T]struct{}{}
			}
			g.extra[x] = struct{}{}
		}
	}
	switch {
	case len(g.got) == sum.Len && g.gotDigest == sum.Digest:
		g.whole = slices.SortedFunc(maps.Keys(g.got), g.cmp)
		g.wholeSum, g.known = sum, true
		g.extra, g.got = nil, nil
	case len(g.got) >= sum.Len:
		g.got = nil
	}
	return g.refresh()
}

// refresh makes items anew from whole and extra, and reports whether they changed.
func (g *Gather[T]) refresh() bool {
	items := slices.Clone(g.whole)
	for x := range g.extra {
		items = append(items, x)
	}
	slices.SortFunc(items, g.cmp)
	items = slices.Compact(items)
	if slices.Equal(items, g.items) {
		return false
	}
	g.items = items
	return true
}

// Items returns the view of the list: every item of the last whole list and every one a
// share carried since, sorted. Callers must not change it.
func (g *Gather[T]) Items() []T { return g.items }

// Whole reports whether a whole list has been gathered: until then Items may lack some.
func (g *Gather[T]) Whole() bool { return g.known }
