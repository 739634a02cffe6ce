package wirecheck

import "testing"

func TestJudge(t *testing.T) {
	type step struct {
		answered, control bool
		want              Change
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"answered", []step{{true, true, Unchanged}, {true, false, Unchanged}}},
		{"two misses make it dark, once", []step{{false, true, Unchanged}, {false, true, Dark}, {false, true, Unchanged}}},
		{"an answer in between starts over", []step{{false, true, Unchanged}, {true, true, Unchanged}, {false, true, Unchanged}, {false, true, Dark}}},
		// A round with neither answered says nothing: this node's link, or the
		// announcer's node, may be cut off, which the probes tell.
		{"blind rounds count for nothing", []step{{false, true, Unchanged}, {false, false, Unchanged}, {false, false, Unchanged}, {false, true, Dark}}},
		{"blind rounds alone never darken", []step{{false, false, Unchanged}, {false, false, Unchanged}, {false, false, Unchanged}}},
		{"lit again on an answer", []step{{false, true, Unchanged}, {false, true, Dark}, {false, false, Unchanged}, {true, false, Lit}, {true, true, Unchanged}}},
	} {
		var st state
		for i, s := range tc.steps {
			if got := judge(&st, outcome(s.answered, s.control), 2); got != s.want {
				t.Errorf("%s: step %d (answered %v, control %v) = %v, want %v", tc.name, i, s.answered, s.control, got, s.want)
			}
		}
	}
}
