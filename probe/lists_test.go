package probe

import (
	"slices"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// TestShares checks how a Responder cuts its lists: each share fits, the shares of both
// lists cover them whole in TurnsToWhole turns, and lists that fit go whole in every
// reply.
func TestShares(t *testing.T) {
	l := ReplyLists{}
	l.SetCovers([]string{"a", "b", "a", "c"})
	l.SetUnable([]Unable{{Pool: "p", Family: iprange.IPv6, Reason: NoUpInterface}, {Pool: "p", Family: iprange.IPv4, Reason: NoUpInterface}, {Pool: "p", Family: iprange.IPv6, Reason: NoUpInterface}})
	r := Reply{State: Ready, Node: "node-a"}
	l.Fill(&r, 7)
	if len(r.Covers) != 3 || r.CoverSum.Len != 3 || len(r.Unable) != 2 || r.UnableSum.Len != 2 || r.Unable[0].Family != iprange.IPv4 {
		t.Errorf("lists that fit: reply %+v, want both whole, without repeats, IPv4 first", r)
	}
	if TurnsToWhole(r.CoverSum, r.UnableSum) != 2 {
		t.Errorf("TurnsToWhole(%+v, %+v) = %d, want 2: one per unable entry at worst", r.CoverSum, r.UnableSum, TurnsToWhole(r.CoverSum, r.UnableSum))
	}
}

// TestAppendReplyRefusesWhatIsFragmented checks that no reply longer than MaxUnfragmented
// is encoded, however its lists were filled.
func TestAppendReplyRefusesWhatIsFragmented(t *testing.T) {
	r := Reply{State: Ready, Node: strings.Repeat("n", MaxNodeName), Covers: make([]uint64, 111), CoverSum: ListSum{Len: 111}}
	if _, err := testKey.AppendReply(nil, r); err == nil || !strings.Contains(err.Error(), "more than the 1232 that travel unfragmented") {
		t.Errorf("AppendReply of %d covers beside the longest name: %v, want an error saying it is fragmented", len(r.Covers), err)
	}
	r.Covers = r.Covers[:(MaxUnfragmented-replyBaseLen(MaxNodeName))/tagLen]
	if b, err := testKey.AppendReply(nil, r); err != nil || len(b) > MaxUnfragmented {
		t.Errorf("AppendReply of %d covers: %d bytes, %v", len(r.Covers), len(b), err)
	}
}

// TestGatherKeepsWhatASharesLeavesOut checks the ccm's view of a list carried in shares:
// an item counts from the first share that carries it, and stops counting only once a
// later whole list has arrived without it, however the shares of two lists mix.
func TestGatherKeepsWhatASharesLeavesOut(t *testing.T) {
	g := NewCoverGather()
	sum := func(tags ...uint64) ListSum { return sumOf(tags, hashTag) }
	take := func(share []uint64, s ListSum, want ...uint64) {
		t.Helper()
		g.Take(share, s)
		if got := g.Items(); !slices.Equal(got, want) {
			t.Errorf("after a share %v of %+v: items %v, want %v", share, s, got, want)
		}
	}
	abc := sum(1, 2, 3)
	take([]uint64{1}, abc, 1)
	if g.Whole() {
		t.Error("whole after one share of three")
	}
	take([]uint64{2, 3}, abc, 1, 2, 3)
	if !g.Whole() {
		t.Error("not whole after every share")
	}
	// Node 1 is no longer covered, 4 is: 4 counts at once, 1 until the list is whole.
	bcd := sum(2, 3, 4)
	take([]uint64{4}, bcd, 1, 2, 3, 4)
	take([]uint64{2}, bcd, 1, 2, 3, 4)
	// A share of another list meanwhile starts the gathering again, keeping what it saw.
	take([]uint64{5}, sum(5, 6), 1, 2, 3, 4, 5)
	take([]uint64{3}, bcd, 1, 2, 3, 4, 5)
	take([]uint64{2, 4}, bcd, 2, 3, 4)
	take([]uint64{2, 3, 4}, bcd, 2, 3, 4)
	// Back to the list known whole: what else was seen is gone.
	take([]uint64{1}, abc, 1, 2, 3, 4)
	take([]uint64{4}, bcd, 2, 3, 4)
	// Shares that do not make the list their sum says are no whole list.
	take([]uint64{7, 8}, sum(7, 9), 2, 3, 4, 7, 8)
	take([]uint64{9}, sum(7, 9), 2, 3, 4, 7, 8, 9)
	take([]uint64{7, 9}, sum(7, 9), 7, 9)
	take(nil, ListSum{}, nil...)
}
