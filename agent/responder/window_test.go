package responder

import (
	"testing"
)

func TestReplayWindow(t *testing.T) {
	var w replayWindow
	for i, tc := range []struct {
		counter uint64
		want    bool
	}{
		{0, false}, // never a counter
		{1, true},
		{1, false},
		{3, true},
		{2, true}, // late, within the window
		{2, false},
		{3, false},
		{3 + windowSize - 1, true},
		{4, true}, // the oldest the window still holds
		{3, false},
		{1000, true},
		{1000 - windowSize, false}, // too far behind to tell: refused
		{1000 - windowSize + 1, true},
		{1000 - windowSize + 1, false},
		{^uint64(0), true},
		{^uint64(0), false},
		{^uint64(0) - 1, true},
	} {
		if got := w.take(tc.counter); got != tc.want {
			t.Errorf("step %d: take(%d) = %v, want %v", i, tc.counter, got, tc.want)
		}
	}
}
