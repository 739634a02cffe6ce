package probe

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// A Responder answers probes for one node. It is safe for concurrent use.
type Responder struct {
	node    string
	key     *Key
	limiter *rate.Limiter
	state   atomic.Uint32

	requests, replies, malformed, unauthenticated, limited atomic.Uint64
}

// Replies are limited to replyRate a second, in bursts of replyBurst: far above what the
// ccm sends (10 a second, about 70 while it suspects an agent), and a bound on what a
// responder could be made to send should a request be replayed at it from elsewhere.
const (
	replyRate  = 1000
	replyBurst = 200
)

// Stats counts the datagrams a Responder has handled.
type Stats struct {
	// Requests is the number of well-formed requests received.
	Requests uint64
	// Replies is the number of replies sent.
	Replies uint64
	// Malformed is the number of datagrams that were not a request of this version.
	Malformed uint64
	// Unauthenticated is the number of requests whose code did not check: sent without
	// the key, or altered on the way.
	Unauthenticated uint64
	// Limited is the number of requests left unanswered over the rate limit.
	Limited uint64
}

// NewResponder returns a Responder for node, in state Ready, that answers the requests
// authenticated with key.
func NewResponder(node string, key *Key) (*Responder, error) {
	if err := checkReply(Reply{State: Ready, Node: node}); err != nil {
		return nil, err
	}
	r := &Responder{node: node, key: key, limiter: rate.NewLimiter(replyRate, replyBurst)}
	r.state.Store(uint32(Ready))
	return r, nil
}

// SetState sets the state the following replies report.
func (r *Responder) SetState(s State) { r.state.Store(uint32(s)) }

// State returns the state replies report.
func (r *Responder) State() State { return State(r.state.Load()) }

// Stats returns what the Responder has handled so far.
func (r *Responder) Stats() Stats {
	return Stats{
		Requests: r.requests.Load(), Replies: r.replies.Load(), Malformed: r.malformed.Load(),
		Unauthenticated: r.unauthenticated.Load(), Limited: r.limited.Load(),
	}
}

// Serve answers the requests arriving on conn until conn is closed, and then returns nil.
// Malformed and unauthenticated datagrams are counted and dropped: the sender learns
// nothing from them, not even that an agent listens.
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
		req, err := r.key.ParseRequest(in[:n])
		switch {
		case errors.Is(err, ErrAuth):
			r.unauthenticated.Add(1)
			continue
		case err != nil:
			r.malformed.Add(1)
			continue
		}
		r.requests.Add(1)
		if !r.limiter.Allow() {
			r.limited.Add(1)
			continue
		}
		out, _ = r.key.AppendReply(out[:0], Reply{Nonce: req.Nonce, State: r.State(), Node: r.node})
		// A failed write (the prober gone, a full buffer) is the prober's miss to count;
		// the responder goes on.
		if _, err := conn.WriteTo(out, from); err == nil {
			r.replies.Add(1)
		}
	}
}
