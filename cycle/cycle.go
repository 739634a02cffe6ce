// Package cycle places the periodic events of many keys, such as the probes of thousands
// of agents or the refreshes of thousands of addresses, each at its own phase of a common
// interval, so that they come spread over the interval instead of all at once.
package cycle

import (
	"hash/fnv"
	"time"
)

// Phase spreads keys over the interval by a hash of the key: stable across restarts and
// processes, and with no state to keep. The interval must be positive.
func Phase(key string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(key))
	return time.Duration(h.Sum64() % uint64(interval))
}

// Next returns the first time not before after that is phase past epoch plus a whole
// number of intervals: the key's place in the cycle.
func Next(epoch, after time.Time, phase, interval time.Duration) time.Time {
	d := after.Sub(epoch) - phase
	k := d / interval
	if d > k*interval {
		k++
	}
	return epoch.Add(phase + k*interval)
}
