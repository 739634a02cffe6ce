package probe

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
)

// A Responder answers probes for one node. It is safe for concurrent use.
type Responder struct {
	node  string
	state atomic.Uint32

	requests, replies, malformed atomic.Uint64
}

// Stats counts the datagrams a Responder has handled.
type Stats struct {
	// Requests is the number of well-formed requests received.
	Requests uint64
	// Replies is the number of replies sent.
	Replies uint64
	// Malformed is the number of datagrams that were not a request of this version.
	Malformed uint64
}

// NewResponder returns a Responder for node, in state Ready.
func NewResponder(node string) (*Responder, error) {
	if _, err := AppendReply(nil, Reply{State: Ready, Node: node}); err != nil {
		return nil, err
	}
	r := &Responder{node: node}
	r.state.Store(uint32(Ready))
	return r, nil
}

// SetState sets the state the following replies report.
func (r *Responder) SetState(s State) { r.state.Store(uint32(s)) }

// State returns the state replies report.
func (r *Responder) State() State { return State(r.state.Load()) }

// Stats returns what the Responder has handled so far.
func (r *Responder) Stats() Stats {
	return Stats{Requests: r.requests.Load(), Replies: r.replies.Load(), Malformed: r.malformed.Load()}
}

// Serve answers the requests arriving on conn until conn is closed, and then returns nil.
// Malformed datagrams are counted and dropped: the sender learns nothing from them.
func (r *Responder) Serve(conn net.PacketConn) error {
	in := make([]byte, 512)
	out := make([]byte, 0, MaxReplyLen)
	for {
		n, from, err := conn.ReadFrom(in)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("probe responder on %s: %w", conn.LocalAddr(), err)
		}
		req, err := ParseRequest(in[:n])
		if err != nil {
			r.malformed.Add(1)
			continue
		}
		r.requests.Add(1)
		out, _ = AppendReply(out[:0], Reply{Nonce: req.Nonce, State: r.State(), Node: r.node})
		// A failed write (the prober gone, a full buffer) is the prober's miss to count;
		// the responder goes on.
		if _, err := conn.WriteTo(out, from); err == nil {
			r.replies.Add(1)
		}
	}
}
