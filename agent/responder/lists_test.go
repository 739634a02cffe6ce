package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// maxedResponder returns a Responder whose replies carry the most of everything: the
// longest node name, covers nodes with the longest names each, and MaxUnable entries
// with the longest pool and interface names. It returns the tags of the covered nodes,
// sorted, and the unable entries, in the order a Gather keeps.
func maxedResponder(t *testing.T, covers int) (*Responder, []uint64, []probe.Unable) {
	t.Helper()
	node := strings.Repeat("n", probe.MaxNodeName)
	r, err := New(node, testKey, testVerifier, testInterval, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var tags []uint64
	for i := range covers {
		names = append(names, fmt.Sprintf("%0253d", i))
		tags = append(tags, probe.NodeTag(names[i]))
	}
	slices.Sort(tags)
	r.SetCovers(names)
	var unable []probe.Unable
	for i := range probe.MaxUnable / 2 {
		for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
			unable = append(unable, probe.Unable{Pool: fmt.Sprintf("%0253d", i), Family: f, Reason: probe.NoAddress, Interface: strings.Repeat("e", probe.MaxInterfaceName)})
		}
	}
	r.SetUnable(unable)
	probe.SortUnable(unable)
	return r, tags, unable
}

// ask sends r the request of counter c from a ccm and parses the reply, checking that it
// fits in a datagram that travels unfragmented.
func askMaxed(t *testing.T, r *Responder, c uint64) probe.Reply {
	t.Helper()
	out, ok := r.Handle(testKey.AppendRequest(nil, probe.Request{Nonce: c, Sender: probe.FromCCM, Instance: 1, Counter: c, To: r.tag}), nil)
	if !ok || len(out) > probe.MaxUnfragmented {
		t.Fatalf("turn %d: reply of %d bytes (sent %v), want at most %d", c, len(out), ok, probe.MaxUnfragmented)
	}
	reply, err := testKey.ParseReply(out)
	if err != nil {
		t.Fatalf("turn %d: %v", c, err)
	}
	return reply
}

// TestReplyFitsUnfragmented has an agent cover hundreds of nodes with the longest names
// and name the most pools it cannot announce, beside the longest node name of its own:
// every reply fits in MaxUnfragmented bytes, and a ccm learns every cover and every pool
// from successive replies, within TurnsToWhole of them.
func TestReplyFitsUnfragmented(t *testing.T) {
	for _, n := range []int{0, 1, 55, 300, 5000} {
		r, tags, unable := maxedResponder(t, n)
		covers, cannot := probe.NewCoverGather(), probe.NewUnableGather()
		turns := 0
		for c := uint64(1); !covers.Whole() || !cannot.Whole(); c++ {
			reply := askMaxed(t, r, c)
			covers.Take(reply.Covers, reply.CoverSum)
			cannot.Take(reply.Unable, reply.UnableSum)
			if turns++; turns > 10000 {
				t.Fatalf("%d covers: not whole after %d replies", n, turns)
			}
		}
		if got := covers.Items(); !slices.Equal(got, tags) {
			t.Errorf("%d covers: gathered %d tags, want %d", n, len(got), len(tags))
		}
		if got := cannot.Items(); !slices.Equal(got, unable) {
			t.Errorf("%d covers: gathered %d unable entries, want %d", n, len(got), len(unable))
		}
		if want := probe.TurnsToWhole(probe.ListSum{Len: n}, probe.ListSum{Len: len(unable)}); turns > want {
			t.Errorf("%d covers: whole after %d replies, TurnsToWhole says %d", n, turns, want)
		}
	}
}
