// Package probe is the wire format of the channel between the ccm and the node agents:
// what each datagram holds, its authentication and signatures, and the lists a reply
// carries in shares. The agent's side of the exchange is package agent/responder.
//
// The ccm sends every agent a small UDP request; the agent echoes its nonce with the name
// of its node, its state, the verdict it holds and the nodes it stands in for. When the ccm
// takes an agent for down, it sends every agent a verdict: the nodes whose addresses their
// standbys announce now. The exchange never touches the API server, so failover needs
// neither it nor a watch. While no ccm is heard, agents probe the agents they back up with
// the same requests.
//
// Version 6 of the format, all integers big-endian, every datagram starting with
//
//	0   2  magic "BM"
//	2   1  version: 6
//	3   1  type: 1 request, 2 reply, 3 verdict, 4 duty, 5 refusal
//
// and, but for a refusal (see AppendRefusal), ending with a 16-byte code, the first 16 bytes of the HMAC-SHA256 of every byte
// before it under the shared key. A name is one byte of length (1 to 253) and the name.
//
//	request, 70 bytes:
//	  4   8  nonce, chosen at random by the prober for each request
//	  12  1  sender: 1 the ccm, 2 an agent checking a peer
//	  13  8  instance: the sender's, chosen at random when its prober starts, never 0
//	  21  8  counter, increasing with every request of the instance, from 1
//	  29  8  sequence of the ccm's current verdict, 0 before its first
//	  37  1  flags: bit 0 set when the duty digest is known; bit 1 set when the agent is
//	         probed at the idle rate, its next request due within IdleFactor probe
//	         intervals (sent only to an agent whose replies set their bit 2); other bits 0
//	  38  8  duty digest: what the ccm expects this agent to announce (Digest)
//	  46  8  to: the NodeTag of the node the request is for
//	  54  8  echo: the challenge of the last reply the sender had from that node (0 for none)
//
//	reply, at most MaxUnfragmented bytes whatever the agent's state:
//	  4   8  the request's nonce
//	  12  8  challenge: the responder's current one, which it changes every ChallengeEvery
//	  20  1  state: 1 ready, 2 draining, 3 starting
//	  21  1  flags: bit 0 set when the agent takes itself for down (it is in the verdict,
//	         or an agent said it stands in for it) and announces nothing; bit 1 set when
//	         it announces only what the ccm's duty confirms; bit 2 set when it takes
//	         requests with the idle bit (agents of earlier releases refuse them)
//	  22  n  the node name
//	  ... 8  instance and 8 sequence of the verdict the agent holds (zeros for none)
//	  ... 8  the resourceVersion its Service cache has reached (0 when unknown)
//	  ... 2  c, the number of nodes the agent stands in for (at most MaxCovers), and 8 the
//	         digest of their NodeTags (ListSum); then 1 m (at most c), and m NodeTags of
//	         8 bytes: this reply's share of them
//	  ... 8  digest of the addresses its own view gives it
//	  ... 1  u, the number of entries (at most 64) of what it cannot announce now, and 8
//	         their digest; then 1 v (at most u), and v entries: 1 family (4 or 6), 1
//	         reason (1 no up interface, 2 no address of the family), a name (the pool), 1
//	         length and the interface name (0 to 15 bytes)
//
//	An agent whose lists do not fit beside the rest sends a share of each in every
//	reply, in turn by the request's counter; a prober gathers them (Gather).
//
//	verdict, signed by the ccm (below):
//	  4   8  instance of the ccm
//	  12  8  sequence, increasing with every new verdict of the instance
//	  20  2  part, from 0, and 2 parts: a verdict too large for one datagram is split
//	  24  2  k, then k names: the part's nodes taken for down
//
//	duty, signed by the ccm, sent to an agent whose reply's digest is not the one the ccm
//	expects:
//	  4   8  instance of the ccm
//	  12  8  sequence, increasing with every duty list the instance makes, for any node
//	  20  8  to: the NodeTag of the node the list is for
//	  28  8  the duty digest
//	  36  2  part, from 0, and 2 parts
//	  40  2  k, then k addresses, each 1 length (4 or 16) and the address
//
// A verdict's and a duty's body ends, before the code, in the 64-byte Ed25519 signature of
// every byte before it, made with a private key only the ccm holds (Signer): the probe key
// is on every node, so root on one of them could otherwise name every other node down. No
// datagram is longer than MaxUnfragmented, so none is ever fragmented.
//
// A responder answers only authenticated requests of a version it speaks, addressed to its
// node, whose counter it has not seen from that sender (a window per sender, see
// replayWindow), within a budget per sender; a prober takes only an authenticated reply
// whose nonce is the one it is waiting for. An agent takes a ccm's request as a sign of the
// ccm's life only if it echoes one of the responder's last two challenges, so a request
// recorded earlier, even one the responder has never seen, is no sign of life. It follows
// one ccm instance at a time, and takes verdicts and duties only from that one; it forgets
// an instance not heard for CCMForgetAfter. So a forged, stray, replayed or delayed
// datagram never counts, and no value on the wire decides which ccm is followed for longer
// than that bound.
package probe

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Version is the version of the wire format this package speaks.
const Version = 6

const (
	typeRequest = 1
	typeReply   = 2
	typeVerdict = 3
	typeDuty    = 4
	typeRefusal = 5

	flagStandsDown    = 1 << 0
	flagConfirmedOnly = 1 << 1
	flagTakesIdle     = 1 << 2
	flagDutyKnown     = 1 << 0
	flagIdle          = 1 << 1

	headerLen = 4
	// RequestLen is the length of an encoded request.
	RequestLen = headerLen + 8 + 1 + 8 + 8 + 8 + 1 + 8 + 8 + 8 + macLen
	// MaxCovers is how many nodes an agent's replies say it stands in for: as many as the
	// count on the wire holds, more than a cluster has nodes. Replies carry them in shares
	// that fit.
	MaxCovers = 1<<16 - 1
	// MaxUnable is how many pool and family pairs an agent's replies name as not
	// announceable; replies carry them in shares that fit.
	MaxUnable = 64
	// MaxDatagram is the size of the largest datagram: a verdict naming every node of a
	// large cluster still fits.
	MaxDatagram = 65507
	// MaxUnfragmented is the size of the largest datagram any sender of this package
	// makes: the IPv6 minimum MTU, 1280, less the IPv6 and UDP headers, so that no datagram
	// is ever fragmented on a link either family runs on. A fragment lost drops the whole
	// datagram, and reassembly is the easiest place to attack a host.
	MaxUnfragmented = 1280 - 40 - 8
	// MaxNodeName is the longest node name: a DNS subdomain, as Kubernetes allows.
	MaxNodeName = 253
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
	// Starting means the agent runs but cannot announce yet: its Service cache has not
	// synced or it has not read its interfaces. It announces nothing, so its standbys
	// should.
	Starting State = 3
)

// String returns "ready", "draining", "starting" or "state(N)".
func (s State) String() string {
	switch s {
	case Ready:
		return "ready"
	case Draining:
		return "draining"
	case Starting:
		return "starting"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Sender says who sent a request.
type Sender uint8

const (
	// FromCCM is a request of the leading ccm's prober.
	FromCCM Sender = 1
	// FromAgent is a request of an agent checking a peer while no ccm is heard.
	FromAgent Sender = 2
)

// Request is a probe sent to an agent.
type Request struct {
	// Nonce is echoed in the reply; the prober uses it to match replies to requests.
	Nonce uint64
	// Sender is who probes.
	Sender Sender
	// Instance identifies the sending prober: chosen at random when it starts, never 0.
	// It orders nothing: an agent follows one ccm instance until it falls silent.
	Instance uint64
	// Counter increases with every request of the instance, from 1: the responder answers
	// each counter of a sender once.
	Counter uint64
	// Verdict is the sequence of the instance's current verdict, 0 before its first.
	Verdict uint64
	// DutyKnown says Duty holds the digest of what the ccm expects the agent to
	// announce; false while the ccm cannot say (it has no verdict or no Services yet).
	DutyKnown bool
	// Duty is the digest of the addresses the ccm expects the agent to announce.
	Duty Digest
	// To is the NodeTag of the node the request is for: a request recorded on its way to
	// one node is nothing to another.
	To uint64
	// Echo is the Challenge of the last reply the sender had from that node, 0 for none.
	Echo uint64
	// Idle says the ccm probes the agent at the idle rate, as one in no Service's plan:
	// its next request comes within IdleFactor probe intervals, and the agent takes the
	// ccm for silent only after that. Set only for an agent whose replies say TakesIdle.
	Idle bool
}

// IdleFactor is how many probe intervals apart the ccm probes an agent that announces
// nothing and stands by for nothing: no address moves when it dies, and the ccm brings
// its probes forward as soon as a plan names it.
const IdleFactor = 10

// Gap returns how long after a request of the ccm the next one comes at the latest,
// probing every interval, or at the idle rate when idle.
func Gap(interval time.Duration, idle bool) time.Duration {
	if idle {
		return IdleFactor * interval
	}
	return interval
}

// SilentAfter is how long an agent waits for the ccm's next request, due within gap,
// before it takes the ccm for silent: half a gap more, for a request late on the way.
func SilentAfter(gap time.Duration) time.Duration { return gap + gap/2 }

// NodeTag is what a request carries to name the node it is for: the first 8 bytes of the
// SHA-256 of the node's name. A fixed size keeps every request the same length.
func NodeTag(node string) uint64 {
	sum := sha256.Sum256([]byte(node))
	return binary.BigEndian.Uint64(sum[:8])
}

// VerdictRef names a verdict: the ccm instance that made it, and its sequence.
type VerdictRef struct {
	Instance, Seq uint64
}

// Replaces reports whether a verdict r, of the ccm instance an agent follows, replaces o:
// a later one of the same instance, or any of another instance, since the agent follows
// a new ccm only once the one before has fallen silent. Instances are random and have no
// order.
func (r VerdictRef) Replaces(o VerdictRef) bool {
	return r.Instance != o.Instance || r.Seq > o.Seq
}

// Reply is an agent's answer to a Request.
type Reply struct {
	// Nonce is the Nonce of the Request answered.
	Nonce uint64
	// Challenge is the responder's current challenge: a ccm's request is a sign of its
	// life only if it echoes one of the last two.
	Challenge uint64
	// State is the agent's state.
	State State
	// Node is the name of the agent's node.
	Node string
	// StandsDown says the agent takes itself for down and announces nothing: the verdict
	// names it, or another agent said it stands in for it while no ccm was heard.
	StandsDown bool
	// Verdict is the verdict the agent holds.
	Verdict VerdictRef
	// CacheVersion is the resourceVersion its Service cache has reached, as a number: the
	// ccm lets a node it moved addresses away from announce again only once its agent has
	// seen the annotations that say so. 0 when unknown.
	CacheVersion uint64
	// Covers are the NodeTags of nodes whose addresses this agent announces in their
	// stead, against what the Services' annotations say: this reply's share of them.
	Covers []uint64
	// CoverSum sums up every node the agent stands in for: at most MaxCovers.
	CoverSum ListSum
	// ConfirmedOnly says the agent announces only what the ccm's duty confirms: its own
	// view has differed from the ccm's for too long, or its Service watch is broken.
	ConfirmedOnly bool
	// TakesIdle says the agent takes requests with the Idle flag: the ccm sets it for no
	// other, as agents of earlier releases refuse a request with a flag they do not know.
	TakesIdle bool
	// Digest is the digest of the addresses the agent's own view gives it.
	Digest Digest
	// Unable are the pools and families the agent cannot announce now: this reply's share
	// of them.
	Unable []Unable
	// UnableSum sums up every pool and family the agent cannot announce: at most
	// MaxUnable.
	UnableSum ListSum
}

// Verdict is the ccm's word on which agents are down: each agent announces an address
// whose announcer is named here when it is the first standby of the address not named.
type Verdict struct {
	VerdictRef
	// Down are the nodes taken for down, sorted.
	Down []string
}

// VerdictPart is one datagram of a Verdict: Down holds the part's nodes.
type VerdictPart struct {
	Verdict
	// Part is this datagram's place, from 0, and Parts their number.
	Part, Parts int
}

// ErrFormat is wrapped by every error about a malformed datagram.
var ErrFormat = errors.New("malformed probe datagram")

// AppendRequest appends the authenticated encoding of r to b.
func (k *Key) AppendRequest(b []byte, r Request) []byte {
	start := len(b)
	b = append(b, magic[0], magic[1], Version, typeRequest)
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	b = append(b, byte(r.Sender))
	b = binary.BigEndian.AppendUint64(b, r.Instance)
	b = binary.BigEndian.AppendUint64(b, r.Counter)
	b = binary.BigEndian.AppendUint64(b, r.Verdict)
	var flags byte
	if r.DutyKnown {
		flags |= flagDutyKnown
	}
	if r.Idle {
		flags |= flagIdle
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Duty))
	b = binary.BigEndian.AppendUint64(b, r.To)
	b = binary.BigEndian.AppendUint64(b, r.Echo)
	return append(b[:start], k.seal(b[start:])...)
}

// AppendReply appends the authenticated encoding of r to b. It fails if a node name is
// empty or longer than 253 bytes, if the state is not one of the defined ones, if a list's
// share is longer than its sum says the list is, or if the reply would be longer than
// MaxUnfragmented: a Responder sends long lists in shares that fit.
func (k *Key) AppendReply(b []byte, r Reply) ([]byte, error) {
	if err := checkReply(r); err != nil {
		return b, err
	}
	start := len(b)
	b = append(b, magic[0], magic[1], Version, typeReply)
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	b = binary.BigEndian.AppendUint64(b, r.Challenge)
	var flags byte
	if r.StandsDown {
		flags |= flagStandsDown
	}
	if r.ConfirmedOnly {
		flags |= flagConfirmedOnly
	}
	if r.TakesIdle {
		flags |= flagTakesIdle
	}
	b = append(b, byte(r.State), flags)
	b = appendName(b, r.Node)
	b = binary.BigEndian.AppendUint64(b, r.Verdict.Instance)
	b = binary.BigEndian.AppendUint64(b, r.Verdict.Seq)
	b = binary.BigEndian.AppendUint64(b, r.CacheVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(r.CoverSum.Len))
	b = binary.BigEndian.AppendUint64(b, r.CoverSum.Digest)
	b = append(b, byte(len(r.Covers)))
	for _, t := range r.Covers {
		b = binary.BigEndian.AppendUint64(b, t)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.Digest))
	b = append(b, byte(r.UnableSum.Len))
	b = binary.BigEndian.AppendUint64(b, r.UnableSum.Digest)
	b = append(b, byte(len(r.Unable)))
	for _, u := range r.Unable {
		b = appendUnable(b, u)
	}
	return append(b[:start], k.seal(b[start:])...), nil
}

// AppendVerdict returns the datagrams of v, signed by s and authenticated by k: one, or
// more when v names more nodes than one holds. It fails if a name is not 1 to 253 bytes,
// or beyond MaxParts datagrams.
func (k *Key) AppendVerdict(s *Signer, v Verdict) ([][]byte, error) {
	for _, n := range v.Down {
		if err := CheckName(n); err != nil {
			return nil, fmt.Errorf("probe verdict: %w", err)
		}
	}
	head := []byte{magic[0], magic[1], Version, typeVerdict}
	head = binary.BigEndian.AppendUint64(head, v.Instance)
	head = binary.BigEndian.AppendUint64(head, v.Seq)
	out, err := k.appendParts(s, head, len(v.Down),
		func(i int) int { return 1 + len(v.Down[i]) },
		func(b []byte, i int) []byte { return appendName(b, v.Down[i]) })
	if err != nil {
		return nil, fmt.Errorf("probe verdict of %d nodes down: %w", len(v.Down), err)
	}
	return out, nil
}

func appendName(b []byte, name string) []byte {
	return append(append(b, byte(len(name))), name...)
}

// CheckName returns an error unless name can travel as a node name: 1 to MaxNodeName
// bytes.
func CheckName(name string) error {
	if n := len(name); n == 0 || n > MaxNodeName {
		return fmt.Errorf("node name %q is %d bytes, want 1 to %d", name, n, MaxNodeName)
	}
	return nil
}

func checkReply(r Reply) error {
	if err := CheckName(r.Node); err != nil {
		return fmt.Errorf("probe reply: %w", err)
	}
	if r.State != Ready && r.State != Draining && r.State != Starting {
		return fmt.Errorf("probe reply: %v is not a state of version %d", r.State, Version)
	}
	if r.CoverSum.Len < 0 || r.CoverSum.Len > MaxCovers || len(r.Covers) > r.CoverSum.Len {
		return fmt.Errorf("probe reply: carries %d of %d covered nodes, at most %d in all", len(r.Covers), r.CoverSum.Len, MaxCovers)
	}
	if r.UnableSum.Len < 0 || r.UnableSum.Len > MaxUnable || len(r.Unable) > r.UnableSum.Len {
		return fmt.Errorf("probe reply: carries %d of %d pools and families it cannot announce, at most %d in all", len(r.Unable), r.UnableSum.Len, MaxUnable)
	}
	for _, u := range r.Unable {
		if err := u.Check(); err != nil {
			return fmt.Errorf("probe reply: %w", err)
		}
	}
	if n := replyLen(r); n > MaxUnfragmented {
		return fmt.Errorf("probe reply: %d bytes with %d covered nodes and %d entries it cannot announce, more than the %d that travel unfragmented", n, len(r.Covers), len(r.Unable), MaxUnfragmented)
	}
	return nil
}

// NewInstance returns a random, non-zero instance for a prober that starts.
func NewInstance() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}
