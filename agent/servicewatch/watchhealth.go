package servicewatch

import "time"

// WatchBroken reports whether the Service watch is broken, and since when.
func (w *Watcher) WatchBroken() (since time.Time, broken bool) { return time.Time{}, false }
