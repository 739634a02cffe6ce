// Package probe is the wire format of the agent health check, and the agent's side of it.
//
// The ccm sends every agent a small UDP request; the agent echoes its nonce with the name
// of its node and its state. The exchange never touches the API server, so the ccm can
// check every node many times a second for the cost of two small packets each.
//
// Version 2 of the format, all integers big-endian:
//
//	request, 28 bytes:
//	  0   2  magic "BM"
//	  2   1  version: 2
//	  3   1  type: 1 (request)
//	  4   8  nonce, chosen at random by the prober for each request
//	  12  16 code: HMAC-SHA256 of bytes 0-11 with the key, first 16 bytes
//
//	reply, 30 to 283 bytes:
//	  0   2  magic "BM"
//	  2   1  version: 2
//	  3   1  type: 2 (reply)
//	  4   8  the request's nonce
//	  12  1  state: 1 ready, 2 draining
//	  13  1  n, the length of the node name (1 to 253)
//	  14  n  the node name
//	  ... 16 code: HMAC-SHA256 of every byte before it with the key, first 16 bytes
//
// Every datagram is authenticated with a key that the ccm and the agents share (Key). A
// responder answers only authenticated requests of a version it speaks; a prober takes only
// an authenticated reply whose nonce is the one it is waiting for, so a forged, stray or
// replayed datagram never counts as an answer. The code always ends the datagram; fields
// that a later version adds come before it, after those of this one.
package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the version of the wire format this package speaks.
const Version = 2

const (
	typeRequest = 1
	typeReply   = 2

	headerLen = 12
	// RequestLen is the length of an encoded request.
	RequestLen = headerLen + macLen
	// MaxReplyLen is the length of the longest encoded reply: a node name is a DNS
	// subdomain, at most 253 bytes.
	MaxReplyLen = headerLen + 2 + maxNodeName + macLen
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

// AppendRequest appends the authenticated encoding of r to b.
func (k *Key) AppendRequest(b []byte, r Request) []byte {
	start := len(b)
	b = append(b, magic[0], magic[1], Version, typeRequest)
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	return append(b[:start], k.seal(b[start:])...)
}

// AppendReply appends the authenticated encoding of r to b. It fails if the node name is
// empty or longer than 253 bytes, or if the state is not one of the defined ones.
func (k *Key) AppendReply(b []byte, r Reply) ([]byte, error) {
	if err := checkReply(r); err != nil {
		return b, err
	}
	start := len(b)
	b = append(b, magic[0], magic[1], Version, typeReply)
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	b = append(b, byte(r.State), byte(len(r.Node)))
	b = append(b, r.Node...)
	return append(b[:start], k.seal(b[start:])...), nil
}

func checkReply(r Reply) error {
	if n := len(r.Node); n == 0 || n > maxNodeName {
		return fmt.Errorf("probe reply: node name %q is %d bytes, want 1 to %d", r.Node, n, maxNodeName)
	}
	if r.State != Ready && r.State != Draining {
		return fmt.Errorf("probe reply: %v is not a state of version %d", r.State, Version)
	}
	return nil
}

// ParseRequest decodes an authenticated request. A datagram that is not one of this
// version is an ErrFormat; one whose code does not check, ErrAuth.
func (k *Key) ParseRequest(b []byte) (Request, error) {
	if err := checkHeader(b, typeRequest); err != nil {
		return Request{}, err
	}
	body, err := k.open(b)
	if err != nil {
		return Request{}, err
	}
	if len(body) < headerLen {
		return Request{}, fmt.Errorf("%w: request of %d bytes, want %d", ErrFormat, len(b), RequestLen)
	}
	return Request{Nonce: binary.BigEndian.Uint64(body[4:12])}, nil
}

// ParseReply decodes an authenticated reply.
func (k *Key) ParseReply(b []byte) (Reply, error) {
	if err := checkHeader(b, typeReply); err != nil {
		return Reply{}, err
	}
	body, err := k.open(b)
	if err != nil {
		return Reply{}, err
	}
	if len(body) < headerLen+2 {
		return Reply{}, fmt.Errorf("%w: reply of %d bytes, want at least %d", ErrFormat, len(b), headerLen+2+macLen)
	}
	state, n := State(body[12]), int(body[13])
	if state != Ready && state != Draining {
		return Reply{}, fmt.Errorf("%w: unknown %v", ErrFormat, state)
	}
	if n == 0 || len(body) < headerLen+2+n {
		return Reply{}, fmt.Errorf("%w: node name of %d bytes in a reply of %d", ErrFormat, n, len(b))
	}
	return Reply{
		Nonce: binary.BigEndian.Uint64(body[4:12]),
		State: state,
		Node:  string(body[14 : 14+n]),
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
