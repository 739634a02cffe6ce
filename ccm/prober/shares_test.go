package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// TestCoversInShares checks a ccm's prober against an agent that stands in for more nodes
// than one reply holds, so that its replies carry them in shares: a new leader's first
// verdict already takes node-a, which stood down, for adopted, though the share that names
// it is not the first to arrive; node-a stays adopted while the other shares come; and it
// is let go only once a whole list without it has arrived.
func TestCoversInShares(t *testing.T) {
	port := agentPort(t)
	rA, _ := startResponder(t, "node-a", "127.0.0.2:"+strconv.Itoa(port))
	rB, _ := startResponder(t, "node-b", "127.0.0.3:"+strconv.Itoa(port))
	// Nodes whose tags sort after node-a's: node-a is in the first share, which the
	// prober's first request (counter 1) does not ask for.
	var others []string
	for i := 0; len(others) < 1000; i++ {
		if n := fmt.Sprintf("other-%d", i); probe.NodeTag(n) > probe.NodeTag("node-a") {
			others = append(others, n)
		}
	}
	rA.SetStandsDown(true)
	rB.SetCovers(append(slices.Clone(others), "node-a"))

	p, changes := startProber(t, port, testNode("node-a", "127.0.0.2"), testNode("node-b", "127.0.0.3"))
	first := p.Verdict()
	if first.Seq != 1 || !slices.Equal(first.Down, []string{"node-a"}) {
		t.Fatalf("first verdict %+v, want node-a down (adopted by node-b)", first)
	}
	if got := p.CoveredBy("node-a"); !slices.Equal(got, []string{"node-b"}) {
		t.Errorf("CoveredBy(node-a) = %v, want node-b", got)
	}
	if got := p.Agents()["node-b"].Covers; len(got) != len(others)+1 || !slices.Contains(got, "node-a") {
		t.Errorf("node-b shown covering %d nodes, want %d with node-a", len(got), len(others)+1)
	}

	// Every share comes round a few times: nothing changes.
	replies := rB.Stats().Replies
	eventually(t, 5*time.Second, "node-b answered 20 more probes", func() bool { return rB.Stats().Replies >= replies+20 })
	if v := p.Verdict(); v.VerdictRef != first.VerdictRef {
		t.Errorf("verdict %+v while node-b's shares came round, want %+v still", v, first)
	}
	if got := p.Health("node-a"); got != liveness.Replaced {
		t.Errorf("node-a is %v while node-b's shares came round, want replaced", got)
	}

	drain(changes)
	rB.SetCovers(others)
	waitState(t, p, changes, "node-a", liveness.Up, 5*time.Second)
	if got := p.CoveredBy("node-a"); len(got) != 0 {
		t.Errorf("CoveredBy(node-a) = %v after node-b's whole list without it", got)
	}
	if got := p.Agents()["node-b"].Covers; len(got) != len(others) {
		t.Errorf("node-b shown covering %d nodes, want %d", len(got), len(others))
	}
}
