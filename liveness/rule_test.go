package liveness

import (
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	type step struct {
		o    Outcome
		want State
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first answer: up at once", []step{{AnsweredReady, Up}}},
		{"first misses: down at the threshold", []step{{Missed, Unknown}, {Refused, Unknown}, {Missed, Down}}},
		{"misses below the threshold keep it up", []step{{AnsweredReady, Up}, {Missed, Up}, {Missed, Up}, {AnsweredReady, Up}, {Missed, Up}, {Missed, Up}}},
		{"threshold of misses in a row: down", []step{{AnsweredReady, Up}, {Missed, Up}, {Refused, Up}, {Missed, Down}}},
		{"back up only after three answers in a row", []step{
			{AnsweredReady, Up}, {Missed, Up}, {Missed, Up}, {Missed, Down},
			{AnsweredReady, Down}, {AnsweredReady, Down}, {Missed, Down},
			{AnsweredReady, Down}, {AnsweredReady, Down}, {AnsweredReady, Up},
		}},
		{"draining at once, whatever came before", []step{{AnsweredReady, Up}, {AnsweredDraining, Draining}, {Missed, Draining}, {Missed, Draining}, {Missed, Down}}},
		// Steps are 100 ms apart, and the busy timeout is 1 s.
		{"busy: up until the busy timeout from the last answer", []step{
			{AnsweredReady, Up}, {Missed, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up},
			{Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Down},
		}},
		{"busy, then an answer: up again, the timeout counted anew", []step{
			{AnsweredReady, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up},
			{AnsweredReady, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Up}, {Busy, Down},
		}},
		{"busy, then no sign of life: down at the threshold of silent misses", []step{{AnsweredReady, Up}, {Missed, Up}, {Busy, Up}, {Busy, Up}, {Missed, Up}, {Missed, Up}, {Missed, Down}}},
		{"one late echo among busy misses changes nothing", []step{{AnsweredReady, Up}, {Busy, Up}, {Busy, Up}, {Missed, Up}, {Busy, Up}, {Missed, Up}, {Busy, Up}}},
		{"busy, then refused: down at the threshold", []step{{AnsweredReady, Up}, {Busy, Up}, {Busy, Up}, {Refused, Up}, {Refused, Up}, {Refused, Down}}},
		{"never answered: busy counts as a miss", []step{{Missed, Unknown}, {Busy, Unknown}, {Busy, Down}}},
		{"down stays down when busy", []step{{AnsweredReady, Up}, {Missed, Up}, {Missed, Up}, {Missed, Down}, {Busy, Down}, {Busy, Down}}},
	} {
		var h Health
		now := time.Unix(1000, 0)
		for i, s := range tc.steps {
			prev := h.State
			now = now.Add(100 * time.Millisecond)
			if changed := h.Observe(s.o, now, Rule{Threshold: 3, BusyTimeout: time.Second}); changed != (prev != s.want) {
				t.Errorf("%s: step %d (%v) reported changed=%v going from %v to %v", tc.name, i, s.o, changed, prev, s.want)
			}
			if h.State != s.want {
				t.Errorf("%s: after step %d (%v) state %v, want %v", tc.name, i, s.o, h.State, s.want)
				break
			}
		}
	}
}
