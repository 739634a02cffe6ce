package pick

import (
	"fmt"
	"slices"
	"strings"
)

// announce picks every group's announcer: the decided ones first, then the current
// announcers up to their bounds, then the rest under their shares.
func (s *spread) announce(rebalance bool) {
	for i := range s.items {
		s.keeper(&s.items[i])
	}
	held := make([]int, len(s.names)) // what each node would hold, were nothing to move
	for i := range s.items {
		if it := &s.items[i]; it.current >= 0 {
			held[it.current]++
			if it.fixed {
				s.load[it.current]++
			}
		}
	}
	var pending []*item
	from := map[*item]int32{}
	for i := range s.items {
		it := &s.items[i]
		switch {
		case len(it.tiers) == 0 || it.fixed:
			continue
		case it.current >= 0 && (!rebalance || s.load[it.current] < s.caps[0][bound][it.current] ||
			!s.relieves(it, it.current, func(n int32) int { return held[n] }, false)):
			s.load[it.current]++
		case it.current >= 0:
			from[it] = it.current
			pending = append(pending, it)
		default:
			pending = append(pending, it)
		}
	}
	s.place(pending, false, func(_ *item, n int32) int { return s.load[n] }, func(it *item, n int32) {
		it.current = n
		if f, ok := from[it]; ok && f != n {
			it.reason = ReasonBalance
			it.why = fmt.Sprintf("%s holds %d addresses, over the bound of %d; %s holds %d",
				s.names[f], held[f], s.caps[0][bound][f], s.names[n], s.load[n])
		}
		s.load[n]++
	})
	for i := range s.items {
		if it := &s.items[i]; it.current >= 0 && len(it.chosen) == 0 {
			it.chosen = []int32{it.current}
		}
	}
	for i := range s.items {
		it := &s.items[i]
		if len(it.chosen) > 0 && it.reason != ReasonStandby && it.reason != ReasonBalance &&
			preference(*it.g, s.names[it.chosen[0]]) < len(it.g.PreferredNodes) {
			it.reason = ReasonPreferred
		}
	}
}

// keeper sets the node that keeps it, if any, as Rank would: the current announcer among
// the best; the first node of the published plan among the candidates when the current
// announcer is not one; the only best candidate.
func (s *spread) keeper(it *item) {
	if len(it.tiers) == 0 {
		return
	}
	if name := it.g.Current; name != "" {
		cur, ok := s.index[name]
		if ok && s.inTier(it, 0, cur) {
			it.current = cur
			return
		}
		if !ok || !s.candidate(it, cur) {
			for _, p := range it.g.Plan {
				if n, ok := s.index[p]; ok && s.candidate(it, n) {
					it.current, it.reason, it.fixed = n, ReasonStandby, !s.inTier(it, 0, n)
					return
				}
			}
		}
	}
	if t := it.tiers[0]; !t.bulk && len(t.nodes) == 1 {
		it.current, it.fixed = t.nodes[0], true
	}
}

// candidate reports whether n is among the nodes Rank puts first: those with endpoints,
// or every eligible node when none has one.
func (s *spread) candidate(it *item, n int32) bool {
	name := s.names[n]
	switch {
	case !it.elig.is[n]:
		return false
	case len(it.g.Local) > 0:
		return len(missingLocal(*it.g, name)) == 0
	case it.reason == ReasonNoEndpoints:
		return true
	}
	return it.g.Endpoints[name] > 0
}

// inTier reports whether n is in the tier ti of it.
func (s *spread) inTier(it *item, ti int, n int32) bool {
	t := it.tiers[ti]
	if !t.bulk {
		return slices.Contains(t.nodes, n)
	}
	if !it.elig.is[n] {
		return false
	}
	for _, o := range it.tiers[:ti] {
		if slices.Contains(o.nodes, n) {
			return false
		}
	}
	return true
}

// relieves reports whether a node of it's next tier, not chosen yet nor except, holds (held) less
// than its bound: only then does moving it away from a node over the bound help.
func (s *spread) relieves(it *item, except int32, held func(int32) int, scenario bool) bool {
	caps := s.capsOf(scenario)[bound]
	return s.pick(it, s.nextTier(it), func(n int32) int {
		if n == except || held(n) >= caps[n] {
			return -1
		}
		return 0
	}) >= 0
}

// bound is the index of the bounds in spread.caps.
const bound = 2

// capsOf returns the caps of the nodes now, or once another node is gone (scenario).
func (s *spread) capsOf(scenario bool) [3][]int {
	if scenario {
		return s.caps[1]
	}
	return s.caps[0]
}

// place gives each item, in order, the next node of its first tier with a node not chosen
// yet: the first in hash order that holds less than its share rounded down, else rounded
// up, else its bound, else the least loaded. held is what a node holds, add counts a
// node's new group; for a standby (scenario), the caps are those of the nodes once the
// announcer is gone. It returns the items placed.
func (s *spread) place(items []*item, scenario bool, held func(*item, int32) int, add func(*item, int32)) []*item {
	caps := s.capsOf(scenario)
	var placed []*item
	for pass := 0; pass <= len(caps) && len(items) > 0; pass++ {
		var left []*item
		for _, it := range items {
			ti := s.nextTier(it)
			if ti < 0 {
				continue
			}
			var n int32
			if pass == len(caps) {
				n = s.pick(it, ti, func(n int32) int { return held(it, n) })
			} else {
				c := caps[pass]
				n = s.pick(it, ti, func(n int32) int {
					if held(it, n) < c[n] {
						return 0
					}
					return -1
				})
			}
			if n < 0 {
				left = append(left, it)
				continue
			}
			it.chosen = append(it.chosen, n)
			add(it, n)
			placed = append(placed, it)
		}
		items = left
	}
	return placed
}

// pick returns the node of tier ti of it, not chosen yet, of the lowest cost, the first
// in hash order among equal costs, or -1 when every cost is negative (not allowed).
func (s *spread) pick(it *item, ti int, cost func(int32) int) int32 {
	t := it.tiers[ti]
	nodes := t.nodes
	if t.bulk {
		nodes = it.elig.nodes
		s.epoch++
		for _, o := range it.tiers[:ti] {
			for _, n := range o.nodes {
				s.mark[n] = s.epoch
			}
		}
	}
	best, bestCost, bestScore := int32(-1), 0, uint64(0)
	for _, n := range nodes {
		if t.bulk && s.mark[n] == s.epoch || slices.Contains(it.chosen, n) {
			continue
		}
		c := cost(n)
		if c < 0 {
			continue
		}
		sc := score(s.hashes[n], it.ipHash)
		if best < 0 || c < bestCost || c == bestCost && (sc < bestScore || sc == bestScore && n < best) {
			best, bestCost, bestScore = n, c, sc
		}
	}
	return best
}

// nextTier returns the first tier of it with a node not chosen yet, or -1.
func (s *spread) nextTier(it *item) int {
	for ti, t := range it.tiers {
		if !t.bulk {
			for _, n := range t.nodes {
				if !slices.Contains(it.chosen, n) {
					return ti
				}
			}
			continue
		}
		explicit := 0
		for _, o := range it.tiers[:ti] {
			explicit += len(o.nodes)
		}
		if len(it.elig.nodes)-explicit > len(it.chosen)-chosenExplicit(it, ti) {
			return ti
		}
	}
	return -1
}

// chosenExplicit counts the chosen nodes of it in the tiers before ti.
func chosenExplicit(it *item, ti int) int {
	c := 0
	for _, n := range it.chosen {
		for _, o := range it.tiers[:ti] {
			if slices.Contains(o.nodes, n) {
				c++
			}
		}
	}
	return c
}

// scenario is a node's share once another node has gone, its groups shared among the
// nodes left: an estimate, exact among equal nodes.
func (s *spread) scenario(share float64) float64 {
	if s.active <= 1 {
		return share
	}
	return share * float64(s.active) / float64(s.active-1)
}

// standbys picks each group's standbys, level by level: at each, the published standby
// keeps its place while the nodes it backs up would, on the announcer's failure, stay
// under their bounds, and the others are placed as announcers are, with the loads the
// nodes would have once the announcer is gone. The groups of one announcer are decided
// together: those of another do not change its failure.
func (s *spread) standbys(levels int) {
	by := make([][]*item, len(s.names))
	for i := range s.items {
		if it := &s.items[i]; len(it.chosen) > 0 {
			by[it.chosen[0]] = append(by[it.chosen[0]], it)
		}
	}
	extra := make([]int, len(s.names)) // the announcer's groups each node backs up, at this level
	held := make([]int, len(s.names))  // the same, were every published standby kept
	standby := make([]int32, 0, 64)
	for level := 1; level <= levels; level++ {
		for _, items := range by {
			var pending, kept []*item
			standby = standby[:0]
			for _, it := range items {
				if len(it.chosen) != level || s.nextTier(it) < 0 {
					continue
				}
				if n := s.published(it); n >= 0 {
					held[n]++
					kept = append(kept, it)
					standby = append(standby, n)
				} else {
					pending = append(pending, it)
				}
			}
			for i, it := range kept {
				n := standby[i]
				if s.load[n]+extra[n] < s.caps[1][bound][n] ||
					!s.relieves(it, n, func(m int32) int { return s.load[m] + held[m] }, true) {
					it.chosen = append(it.chosen, n)
					extra[n]++
					continue
				}
				pending = append(pending, it)
			}
			slices.SortFunc(pending, func(a, b *item) int { return strings.Compare(a.g.FirstIP, b.g.FirstIP) })
			s.place(pending, true, func(_ *item, n int32) int { return s.load[n] + extra[n] }, func(_ *item, n int32) { extra[n]++ })
			for _, it := range items {
				for _, n := range it.chosen[1:] {
					extra[n], held[n] = 0, 0
				}
			}
		}
	}
}

// published returns the first node of it's published standbys not chosen yet, if it may
// stand by next, or -1. A group decided without history (failback) has none.
func (s *spread) published(it *item) int32 {
	if it.g.Current == "" || len(it.g.Plan) < 2 {
		return -1
	}
	ti := s.nextTier(it)
	for _, name := range it.g.Plan[1:] {
		n, ok := s.index[name]
		if !ok || slices.Contains(it.chosen, n) {
			continue
		}
		if s.inTier(it, ti, n) {
			return n
		}
		return -1
	}
	return -1
}
