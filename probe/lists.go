package probe

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// A reply carries two lists that can outgrow a datagram that travels unfragmented: the
// nodes the agent stands in for, and the pools and families it cannot announce. It
// carries a share of each, chosen by the request's counter, with the sum of the whole
// list, so that a prober gathers the whole list from successive replies (Gather) and
// every reply stays within MaxUnfragmented bytes, whatever the agent's state.
//
// Covered nodes travel as NodeTags rather than names: 8 bytes instead of up to 254, so
// that a reply holds tens of them even beside a node name of 253 bytes, and most agents'
// whole list fits in one reply. The ccm and the agents know every node's name, so a tag
// names a node as well as its name does (the requests name their node the same way).
// Pools keep their names: the ccm's events and status page show them, and config limits
// them to 63 bytes, so most agents' whole list fits in one reply too.

// ListSum sums up a whole list a reply carries a share of: how many items it has, and a
// digest of them, so that a prober knows when the shares it has gathered make the whole
// list, and that the list changed when the sum did. The zero ListSum is the empty list's.
type ListSum struct {
	// Len is the number of items of the whole list.
	Len int
	// Digest is the exclusive or of the items' hashes: it does not depend on their order,
	// and a gatherer adds an item to it with one hash.
	Digest uint64
}

// coversHeadLen and unableHeadLen are what each list takes in a reply besides its items: 2
// bytes (covers) or 1 byte (unable) of length, 8 of digest and 1 of the share's count.
const (
	coversHeadLen = 2 + 8 + 1
	unableHeadLen = 1 + 8 + 1
)

// replyBaseLen is the length of a reply whose node name is node bytes long, with both
// lists empty.
func replyBaseLen(node int) int {
	return headerLen + 8 + 8 + 1 + 1 + 1 + node + 16 + 8 + coversHeadLen + 8 + unableHeadLen + macLen
}

// replyLen is the length of r's encoding.
func replyLen(r Reply) int {
	n := replyBaseLen(len(r.Node)) + tagLen*len(r.Covers)
	for _, u := range r.Unable {
		n += unableLen(u)
	}
	return n
}

// tagLen is the length of a NodeTag on the wire.
const tagLen = 8

// unableLen is the length of u's encoding in a reply.
func unableLen(u Unable) int { return 2 + 1 + len(u.Pool) + 1 + len(u.Interface) }

func appendUnable(b []byte, u Unable) []byte {
	b = append(b, wireFamily(u.Family), byte(u.Reason))
	b = appendName(b, u.Pool)
	return append(append(b, byte(len(u.Interface))), u.Interface...)
}

// hashTag and hashUnable are the hashes a ListSum's digest combines.
func hashTag(t uint64) uint64 {
	var b [tagLen]byte
	binary.BigEndian.PutUint64(b[:], t)
	return hash8(b[:])
}

func hashUnable(u Unable) uint64 { return hash8(appendUnable(nil, u)) }

func hash8(b []byte) uint64 {
	h := sha256.Sum256(b)
	return binary.BigEndian.Uint64(h[:8])
}

// sumOf returns the sum of items, which must hold no repeats.
func sumOf[T any](items []T, hash func(T) uint64) ListSum {
	s := ListSum{Len: len(items)}
	for _, x := range items {
		s.Digest ^= hash(x)
	}
	return s
}

// compareUnable orders Unables by every field, pool and family first as SortUnable does,
// so that the shares of a list are the same from one reply to the next.
func compareUnable(a, b Unable) int {
	return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Family, b.Family), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Interface, b.Interface))
}

// ReplyLists are the whole lists an agent's replies carry shares of: sorted, without
// repeats, and summed once when set rather than with every reply.
type ReplyLists struct {
	covers    []uint64
	coverSum  ListSum
	unable    []Unable
	unableSum ListSum
	// unableBytes is the length of every entry of unable on the wire.
	unableBytes int
}

// SetCovers sets the covers to the tags of nodes, which must be valid names, keeping at
// most MaxCovers.
func (l *ReplyLists) SetCovers(nodes []string) {
	tags := make([]uint64, 0, len(nodes))
	for _, n := range nodes {
		tags = append(tags, NodeTag(n))
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	l.covers = tags[:min(len(tags), MaxCovers)]
	l.coverSum = sumOf(l.covers, hashTag)
}

// SetUnable sets the unable list to u, whose entries must be valid, keeping at most
// MaxUnable.
func (l *ReplyLists) SetUnable(u []Unable) {
	u = slices.Clone(u)
	slices.SortFunc(u, compareUnable)
	u = slices.Compact(u)
	l.unable = u[:min(len(u), MaxUnable)]
	l.unableSum = sumOf(l.unable, hashUnable)
	l.unableBytes = 0
	for _, x := range l.unable {
		l.unableBytes += unableLen(x)
	}
}

// Fill sets r's lists to the turn-th share of each that, with the rest of r, fits in
// MaxUnfragmented bytes. While both lists fit, every share is the whole list. Otherwise a
// list that needs no more than half the room gets what it needs and the other one the
// rest, or each gets half; half the room beside the longest node name still holds 55
// tags or the longest unable entry, so every share carries something of a list that is
// not empty. Consecutive turns go through every share of each list: the prober's
// counters of requests to one node are consecutive.
func (l *ReplyLists) Fill(r *Reply, turn uint64) {
	room := MaxUnfragmented - replyBaseLen(len(r.Node))
	coverBytes, unableBytes := tagLen*len(l.covers), l.unableBytes
	if coverBytes+unableBytes > room {
		half := room / 2
		switch {
		case unableBytes <= half:
			coverBytes = room - unableBytes
		case coverBytes <= half:
			unableBytes = room - coverBytes
		default:
			coverBytes, unableBytes = half, room-half
		}
	}
	r.Covers, r.CoverSum = coverShare(l.covers, coverBytes/tagLen, turn), l.coverSum
	r.Unable, r.UnableSum = unableShare(l.unable, unableBytes, turn), l.unableSum
}

// coverShare returns the turn-th share of tags, per tags a share.
func coverShare(tags []uint64, per int, turn uint64) []uint64 {
	if len(tags) <= per {
		return tags
	}
	shares := (len(tags) + per - 1) / per
	i := int(turn%uint64(shares)) * per
	return tags[i:min(i+per, len(tags))]
}

// unableShare returns the turn-th share of u, cut in order into shares of at most room
// bytes each.
func unableShare(u []Unable, room int, turn uint64) []Unable {
	var starts []int
	used := room // so that the first entry starts a share
	for i, x := range u {
		if used+unableLen(x) > room {
			starts, used = append(starts, i), 0
		}
		used += unableLen(x)
	}
	if len(starts) <= 1 {
		return u
	}
	k := int(turn % uint64(len(starts)))
	end := len(u)
	if k+1 < len(starts) {
		end = starts[k+1]
	}
	return u[starts[k]:end]
}

// TurnsToWhole returns how many consecutive replies at most an agent whose lists have
// these sums needs to carry every share of both, whatever its node name's length: how
// long a prober waits, losses aside, for a whole list.
func TurnsToWhole(covers, unable ListSum) int {
	half := (MaxUnfragmented - replyBaseLen(MaxNodeName)) / 2
	perShare := half / tagLen
	return max(1, (covers.Len+perShare-1)/perShare, unable.Len)
}
