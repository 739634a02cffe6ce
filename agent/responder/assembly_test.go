package responder

import (
	"slices"
	"testing"
)

// TestAssemblyOrder checks how the parts of signed messages are put together: in any
// order, a part seen twice counted once, an older message's parts left alone, and an
// unfinished message dropped by a part of a newer one, whose older parts then count for
// nothing.
func TestAssemblyOrder(t *testing.T) {
	var a assembly[string]
	add := func(seq uint64, part, parts int, items ...string) ([]string, bool) {
		return a.add(7, seq, part, parts, items)
	}
	if _, whole := add(5, 2, 3, "e"); whole {
		t.Fatal("whole after one part of three")
	}
	if _, whole := add(5, 2, 3, "e"); whole {
		t.Fatal("whole after the same part replayed")
	}
	if _, whole := add(4, 0, 1, "old"); whole {
		t.Fatal("an older message taken while a newer one is gathered")
	}
	add(5, 0, 3, "a", "b")
	got, whole := add(5, 1, 3, "c", "d")
	if !whole || !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("parts 2, 0, 1: %v, %v; want a to e in the parts' order", got, whole)
	}

	add(8, 0, 2, "x")
	add(9, 1, 2, "z") // a newer message: 8 is dropped unfinished
	if _, whole := add(8, 1, 2, "y"); whole {
		t.Fatal("the rest of a dropped message made it whole")
	}
	if got, whole := add(9, 0, 2); !whole || !slices.Equal(got, []string{"z"}) {
		t.Errorf("message 9 with an empty part: %v, %v; want [z], true", got, whole)
	}
}
