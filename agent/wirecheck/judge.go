// Package wirecheck checks on the wire that the addresses a node backs are answered: it
// asks for each, as a client does, on a slow schedule spread over an interval, and tells
// when an announcer's address goes unanswered twice in a row while the announcer's node
// answers for its own address on the same link. That is a responder that is stuck, a
// socket on the wrong interface, a filter that drops its requests or its replies: the
// agent answers the ccm's probes, and clients get nothing.
//
// The check looks from the segment, where clients are. A round in which neither the
// address nor the announcer's own address is answered says nothing of the announcer's
// responder (its node, or this node's link, may be cut off: the probes tell those apart),
// and counts for nothing.
package wirecheck

// Outcome is what one round tells of one address.
type Outcome uint8

// The outcomes of a round, as counted in metrics.
const (
	// Answered: the address was answered.
	Answered Outcome = iota
	// Unanswered: the address was not answered, and the announcer's own address was.
	Unanswered
	// Blind: neither was answered: the round says nothing of the responder.
	Blind
	outcomes
)

var outcomeNames = [outcomes]string{"Answered", "Unanswered", "Blind"}

// String returns the outcome's name, as in metrics.
func (o Outcome) String() string { return outcomeNames[o] }

// Change is what a round changes of an address's state.
type Change uint8

// The changes a round can make.
const (
	// Unchanged: nothing to tell.
	Unchanged Change = iota
	// Dark: the address went unanswered Misses rounds in a row: report it.
	Dark
	// Lit: a dark address is answered again.
	Lit
)

// state is what the check remembers of one address.
type state struct {
	// misses counts the rounds in a row that left the address unanswered.
	misses int
	dark   bool
}

// outcome returns what a round tells: whether the address and the announcer's node's
// own address (the control) were answered.
func outcome(answered, controlAnswered bool) Outcome {
	switch {
	case answered:
		return Answered
	case controlAnswered:
		return Unanswered
	}
	return Blind
}

// judge takes one round's outcome into st, where misses rounds in a row unanswered make
// an address dark, and returns what changed.
func judge(st *state, o Outcome, misses int) Change {
	switch o {
	case Answered:
		st.misses = 0
		if st.dark {
			st.dark = false
			return Lit
		}
	case Unanswered:
		st.misses++
		if st.misses >= misses && !st.dark {
			st.dark = true
			return Dark
		}
	}
	return Unchanged
}
