// Package probe is the wire format of the agent health check, and the agent's side of it.
//
// The ccm sends every agent a small UDP request; the agent echoes its nonce with the name
// of its node and its state. The exchange never touches the API server, so the ccm can
// check every node many times a second for the cost of two small packets each.
//
// Version 1 of the format, all integers big-endian:
//
//	request, 12 bytes:
//	  0   2  magic "BM"
//	  2   1  version: 1
//	  3   1  type: 1 (request)
//	  4   8  nonce, chosen by the prober
//
//	reply, 14 to 267 bytes:
//	  0   2  magic "BM"
//	  2   1  version: 1
//	  3   1  type: 2 (reply)
//	  4   8  the request's nonce
//	  12  1  state: 1 ready, 2 draining
//	  13  1  n, the length of the node name (1 to 253)
//	  14  n  the node name
//
// A responder answers only requests of a version it speaks, and a prober takes only a reply
// whose nonce is one it sent: a stray or replayed datagram never counts as an answer.
// Bytes after the fields a version defines are ignored, so a later version may add some.
package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the version of the wire format this package speaks.
const Version = 1

const (
	typeRequest = 1
	typeReply   = 2

	headerLen = 12
	// RequestLen is the length of an encoded request.
	RequestLen = headerLen
	// MaxReplyLen is the length of the longest encoded reply: a node name is a DNS
	// subdomain, at most 253 bytes.
	MaxReplyLen = headerLen + 2 + maxNodeName
	maxNodeName = 253
)

var magic = [2]byte{'B', 'M'}

// State is what an agent says of itself.
type State uint8

const (
	// Ready means the agent announces the addresses its node owns and can take more.
	Ready State = 1
	// Draining means the agent is shutting down: it still answers for what it owns, but
	// no address should be given to it.
	Draining State = 2
)

// String returns "ready", "draining" or "state(N)".
func (s State) String() string {
	switch s {
	case Ready:
		return "ready"
	case Draining:
		return "draining"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Request is a probe sent to an agent.
type Request struct {
	// Nonce is echoed in the reply; the prober uses it to match replies to requests.
	Nonce uint64
}

// Reply is an agent's answer to a Request.
type Reply struct {
	// Nonce is the Nonce of the Request answered.
	Nonce uint64
	// State is the agent's state.
	State State
	// Node is the name of the agent's node.
	Node string
}

// ErrFormat is wrapped by every error about a malformed datagram.
var ErrFormat = errors.New("malformed probe datagram")

// AppendRequest appends the encoding of r to b.
func AppendRequest(b []byte, r Request) []byte {
	b = append(b, magic[0], magic[1], Version, typeRequest)
	return binary.BigEndian.AppendUint64(b, r.Nonce)
}

// AppendReply appends the encoding of r to b. It fails if the node name is empty or longer
// than 253 bytes, or if the state is not one of the defined ones.
func AppendReply(b []byte, r Reply) ([]byte, error) {
	if n := len(r.Node); n == 0 || n > maxNodeName {
		return b, fmt.Errorf("probe reply: node name %q is %d bytes, want 1 to %d", r.Node, n, maxNodeName)
	}
	if r.State != Ready && r.State != Draining {
		return b, fmt.Errorf("probe reply: %v is not a state of version %d", r.State, Version)
	}
	b = append(b, magic[0], magic[1], Version, typeReply)
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	b = append(b, byte(r.State), byte(len(r.Node)))
	return append(b, r.Node...), nil
}

// ParseRequest decodes a request.
func ParseRequest(b []byte) (Request, error) {
	if err := checkHeader(b, typeRequest); err != nil {
		return Request{}, err
	}
	return Request{Nonce: binary.BigEndian.Uint64(b[4:12])}, nil
}

// ParseReply decodes a reply.
func ParseReply(b []byte) (Reply, error) {
	if err := checkHeader(b, typeReply); err != nil {
		return Reply{}, err
	}
	if len(b) < headerLen+2 {
		return Reply{}, fmt.Errorf("%w: reply of %d bytes, want at least %d", ErrFormat, len(b), headerLen+2)
	}
	state, n := State(b[12]), int(b[13])
	if state != Ready && state != Draining {
		return Reply{}, fmt.Errorf("%w: unknown %v", ErrFormat, state)
	}
	if n == 0 || len(b) < headerLen+2+n {
		return Reply{}, fmt.Errorf("%w: node name of %d bytes in a reply of %d", ErrFormat, n, len(b))
	}
	return Reply{
		Nonce: binary.BigEndian.Uint64(b[4:12]),
		State: state,
		Node:  string(b[14 : 14+n]),
	}, nil
}

func checkHeader(b []byte, typ byte) error {
	switch {
	case len(b) < headerLen:
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrFormat, len(b), headerLen)
	case b[0] != magic[0] || b[1] != magic[1]:
		return fmt.Errorf("%w: magic %#x, want %#x", ErrFormat, b[:2], magic[:])
	case b[2] != Version:
		return fmt.Errorf("%w: version %d, want %d", ErrFormat, b[2], Version)
	case b[3] != typ:
		return fmt.Errorf("%w: type %d, want %d", ErrFormat, b[3], typ)
	}
	return nil
}
