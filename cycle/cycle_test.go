package cycle

import (
	"fmt"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	epoch := time.Now()
	const interval = 100 * time.Millisecond
	for _, tc := range []struct {
		after, phase, want time.Duration
	}{
		{0, 0, 0},
		{1, 0, interval},
		{0, 30 * time.Millisecond, 30 * time.Millisecond},
		{30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond},
		{31 * time.Millisecond, 30 * time.Millisecond, 130 * time.Millisecond},
		{250 * time.Millisecond, 30 * time.Millisecond, 330 * time.Millisecond},
	} {
		if got := Next(epoch, epoch.Add(tc.after), tc.phase, interval).Sub(epoch); got != tc.want {
			t.Errorf("Next(+%v, phase %v) = +%v, want +%v", tc.after, tc.phase, got, tc.want)
		}
	}
}

// TestPhasesSpread checks that 5,000 keys are spread evenly over the interval: no tenth
// of it holds more than a fifth above its share.
func TestPhasesSpread(t *testing.T) {
	const interval = 100 * time.Millisecond
	var buckets [10]int
	for i := range 5000 {
		ph := Phase(fmt.Sprintf("node-%d", i), interval)
		if ph < 0 || ph >= interval {
			t.Fatalf("phase %v out of the interval", ph)
		}
		buckets[ph*10/interval]++
	}
	for i, n := range buckets {
		if n < 400 || n > 600 {
			t.Errorf("tenth %d of the interval holds %d of 5,000 keys, want about 500: %v", i, n, buckets)
		}
	}
	// The same in every process and release, as FNV-1a makes it: a fixed value, so that a
	// change of the hash shows.
	if got, want := Phase("node-1", interval), 42600643*time.Nanosecond; got != want {
		t.Errorf("Phase(node-1, %v) = %v, want %v", interval, got, want)
	}
}
