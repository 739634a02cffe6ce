package responder

// windowSize is how far behind the highest counter seen a request may arrive and still be
// taken: datagrams on one segment are seldom reordered by more than a few, and a request
// 64 counters late (6 s of a ccm's probes) is of no use to anyone.
const windowSize = 64

// replayWindow takes each counter of one sender at most once, as IPsec does (RFC 4303,
// 3.4.3): it keeps the highest counter taken and a bit for each of the windowSize counters
// below it. The zero value has taken nothing; counter 0 is never taken.
type replayWindow struct {
	highest uint64
	// seen has bit i set when counter highest-i was taken.
	seen uint64
}

// take reports whether counter is new, and records it if so. A counter too far behind the
// highest is refused as if seen: the window cannot tell.
func (w *replayWindow) take(counter uint64) bool {
	switch {
	case counter == 0:
		return false
	case counter > w.highest:
		if shift := counter - w.highest; shift < windowSize {
			w.seen = w.seen<<shift | 1
		} else {
			w.seen = 1
		}
		w.highest = counter
		return true
	}
	behind := w.highest - counter
	if behind >= windowSize || w.seen&(1<<behind) != 0 {
		return false
	}
	w.seen |= 1 << behind
	return true
}
