package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestVerdictInParts checks that a verdict of thousands of nodes travels in datagrams
// that are never fragmented, and that an agent takes it once all are in, in any order.
func TestVerdictInParts(t *testing.T) {
	down := make([]string, 3000)
	for i := range down {
		down[i] = fmt.Sprintf("rack-%02d-node-%04d", i/100, i)
	}
	down[7] = strings.Repeat("n", probe.MaxNodeName)
	parts, err := testKey.AppendVerdict(testSigner, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 10, Seq: 1}, Down: down})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3000*20/probe.MaxUnfragmented {
		t.Fatalf("3,000 nodes in %d datagrams", len(parts))
	}
	for i, b := range parts {
		if len(b) > probe.MaxUnfragmented {
			t.Errorf("part %d is %d bytes, more than %d", i, len(b), probe.MaxUnfragmented)
		}
	}
	r := newTestResponder(t)
	ccm := newTalker(r, probe.FromCCM, 10)
	ccm.ask(t, ccm.next())
	ccm.ask(t, ccm.next()) // echoing: the ccm is followed
	for i := len(parts) - 1; i >= 0; i-- {
		if got := r.Verdict(); got.Seq != 0 {
			t.Fatalf("verdict taken with %d of %d parts in", len(parts)-1-i, len(parts))
		}
		r.Handle(parts[i], nil)
	}
	if got := r.Verdict(); got.Seq != 1 || !reflect.DeepEqual(got.Down, down) {
		t.Errorf("verdict after all parts: seq %d, %d nodes down; want 1, 3000", got.Seq, len(got.Down))
	}
}
