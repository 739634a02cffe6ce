// Package responder is the agent's side of the probe channel (package probe): it answers
// the ccm's and the peers' requests for this node, each sender within its own budget and
// replay window, follows one ccm instance at a time, and takes the verdicts and duty
// lists that ccm signed.
package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
)

// A Responder answers probes for one node, and takes the ccm's verdicts. It is safe for
// concurrent use.
type Responder struct {
	node string
	// tag is the node's NodeTag: requests and duties for another node are not taken.
	tag uint64
	key *probe.Key
	// ccm checks that verdicts and duties are the ccm's.
	ccm *probe.Verifier
	// cacheVersion returns the resourceVersion the agent's Service cache has reached; nil
	// when unknown.
	cacheVersion func() uint64
	senders      senders
	state        atomic.Uint32
	// lastCCM is when the ccm followed was last heard, in Unix nanoseconds.
	lastCCM atomic.Int64
	// conn is the socket Serve reads, for Unread.
	conn atomic.Pointer[net.PacketConn]

	mu sync.Mutex
	// challenges are what replies carry and the ccm's requests must echo to count.
	challenges challenges
	// follow is the ccm instance followed.
	follow follow
	// interval is the probe interval (failover.probeInterval), and idle whether the newest
	// request of the ccm followed said the agent is probed at the idle rate: the next
	// request is due within Gap of them.
	interval time.Duration
	idle     bool
	// newestVerdict is the verdict the newest request of the ccm followed said it is at.
	newestVerdict probe.VerdictRef
	verdict       probe.Verdict
	verdictParts  assembly[string]
	standsDown    bool
	onVerdict     func()
	// expected is the duty digest the newest ccm request carried, if it knew one.
	expected      probe.Digest
	expectedKnown bool
	onExpected    func()
	// duty is the newest duty list taken, and parts the parts of one still arriving.
	duty      *probe.Duty
	dutyParts assembly[netip.Addr]
	onDuty    func()
	// digest and confirmedOnly are what the following replies say of the agent's own
	// view, and lists the nodes it stands in for and what it cannot announce.
	digest        probe.Digest
	confirmedOnly bool
	lists         probe.ReplyLists

	// refusals limits the refusals of requests made with another key to one a second.
	refusals *rate.Limiter
	authLog  probe.AuthLog
	// signLog logs verdicts and duties made with the probe key but not the ccm's private key.
	signLog probe.AuthLog

	requests, replies, malformed, unauthenticated, unsigned, misdirected, replayed, limited, verdicts, staleVerdicts atomic.Uint64
}

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
	// Unsigned is the number of authenticated verdicts and duty lists whose signature is
	// not the ccm's: made by someone who holds the probe key, such as root on a node.
	Unsigned uint64
	// Misdirected is the number of authenticated requests for another node: recorded on
	// their way to it and sent here, or sent to a wrong address.
	Misdirected uint64
	// Replayed is the number of authenticated requests whose counter their sender had
	// used before, or too far behind its newest: left unanswered, at no cost to anyone's
	// budget.
	Replayed uint64
	// Limited is the number of requests left unanswered over their sender's budget.
	Limited uint64
	// Verdicts is the number of verdicts taken.
	Verdicts uint64
	// StaleVerdicts is the number of verdict datagrams left because they were not
	// newer than the one held (replayed or late), or were not of the ccm followed.
	StaleVerdicts uint64
}

// New returns a Responder for node, in state Ready, that answers the requests
// authenticated with key, and takes the verdicts and duty lists that are also signed by a
// key of ccm. interval is the ccm's probe interval (failover.probeInterval): how soon its
// next request is due, unless a request says the agent is probed at the idle rate.
// cacheVersion, if not nil, returns the resourceVersion the agent's Service cache has
// reached, which the replies carry.
func New(node string, key *probe.Key, ccm *probe.Verifier, interval time.Duration, cacheVersion func() uint64) (*Responder, error) {
	if err := probe.CheckName(node); err != nil {
		return nil, fmt.Errorf("probe responder: %w", err)
	}
	r := &Responder{node: node, tag: probe.NodeTag(node), key: key, ccm: ccm, interval: interval, cacheVersion: cacheVersion, refusals: rate.NewLimiter(1, 1)}
	r.state.Store(uint32(probe.Ready))
	return r, nil
}

// SetState sets the state the following replies report.
func (r *Responder) SetState(s probe.State) { r.state.Store(uint32(s)) }

// SwapState sets the state the following replies report to s if it is from, and reports
// whether it was: a starting agent becomes ready unless it began draining meanwhile.
func (r *Responder) SwapState(from, s probe.State) bool {
	return r.state.CompareAndSwap(uint32(from), uint32(s))
}

// State returns the state replies report.
func (r *Responder) State() probe.State { return probe.State(r.state.Load()) }

// Stats returns what the Responder has handled so far.
func (r *Responder) Stats() Stats {
	return Stats{
		Requests: r.requests.Load(), Replies: r.replies.Load(), Malformed: r.malformed.Load(),
		Unauthenticated: r.unauthenticated.Load(), Unsigned: r.unsigned.Load(), Misdirected: r.misdirected.Load(), Replayed: r.replayed.Load(), Limited: r.limited.Load(),
		Verdicts: r.verdicts.Load(), StaleVerdicts: r.staleVerdicts.Load(),
	}
}

// OnVerdict registers f to be called after every verdict taken. Call it before Serve.
func (r *Responder) OnVerdict(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onVerdict = f
}

// Verdict returns the newest verdict taken; the zero Verdict before the first.
func (r *Responder) Verdict() probe.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdict
}

// Unread reports whether datagrams wait in Serve's socket, unread: this process is
// behind (short of CPU), and a ccm's requests may be among them. False when it cannot
// tell.
func (r *Responder) Unread() bool {
	c := r.conn.Load()
	if c == nil {
		return false
	}
	sc, ok := (*c).(syscall.Conn)
	return ok && liveness.Unread(sc) > 0
}

// LastCCM returns when the ccm followed was last heard: its last request that echoed a
// recent challenge. The zero time before one.
func (r *Responder) LastCCM() time.Time {
	if ns := r.lastCCM.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// SilentAfter returns how long after LastCCM the ccm followed is taken for silent: half a
// gap more than its last request said the next may take (Gap).
func (r *Responder) SilentAfter() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return probe.SilentAfter(probe.Gap(r.interval, r.idle))
}

// CCMVerdict returns the verdict the newest request of the ccm followed said it is at:
// when it is the one held, the agent knows it is up to date. Seq is 0 while that ccm has
// none yet.
func (r *Responder) CCMVerdict() probe.VerdictRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newestVerdict
}

// CacheVersion returns the resourceVersion the replies say the agent's Service cache has
// reached; 0 when unknown.
func (r *Responder) CacheVersion() uint64 {
	if r.cacheVersion == nil {
		return 0
	}
	return r.cacheVersion()
}

// SetStandsDown sets whether the following replies say the agent takes itself for down.
func (r *Responder) SetStandsDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.standsDown = down
}

// SetCovers sets the nodes the following replies say this agent stands in for. Only
// valid node names count, as the names come from annotations, and at most MaxCovers of
// them; replies carry them in shares when they do not fit in one.
func (r *Responder) SetCovers(nodes []string) {
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return probe.CheckName(n) != nil })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists.SetCovers(nodes)
}

// Serve answers the requests and takes the verdicts arriving on conn until conn is
// closed, and then returns nil. Malformed and unauthenticated datagrams are counted and
// dropped: the sender learns nothing from them, not even that an agent listens.
func (r *Responder) Serve(conn net.PacketConn) error {
	r.conn.Store(&conn)
	in := make([]byte, probe.MaxDatagram)
	var out []byte
	for {
		n, from, err := conn.ReadFrom(in)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("probe responder on %s: %w", conn.LocalAddr(), err)
		}
		var ok bool
		if out, ok = r.Handle(in[:n], out[:0]); !ok {
			continue
		}
		// A failed write (the prober gone, a full buffer) is the prober's miss to count;
		// the responder goes on.
		if _, err := conn.WriteTo(out, from); err == nil && !probe.IsRefusal(out) {
			r.replies.Add(1)
		}
	}
}

// Handle takes one datagram that arrived: it takes a verdict or a duty, and answers a
// request by appending the reply to out. It reports whether there is a reply to send.
// Serve calls it for every datagram; a server of its own, such as one that answers for
// many nodes on one socket, may call it instead.
func (r *Responder) Handle(in, out []byte) ([]byte, bool) {
	if probe.IsVerdict(in) {
		r.takeVerdict(in)
		return out, false
	}
	if probe.IsDuty(in) {
		r.takeDuty(in)
		return out, false
	}
	req, err := r.key.ParseRequest(in)
	if r.rejected(err) {
		if nonce, ok := probe.RequestNonce(in); ok && errors.Is(err, probe.ErrAuth) {
			return r.refuse(out, nonce)
		}
		return out, false
	}
	r.requests.Add(1)
	if req.To != r.tag {
		r.misdirected.Add(1)
		return out, false
	}
	// Freshness first: a replay is dropped before it can spend a budget.
	now := time.Now()
	switch r.senders.admit(senderKey{from: req.Sender, instance: req.Instance}, req.Counter, now) {
	case replayed:
		r.replayed.Add(1)
		return out, false
	case limited:
		r.limited.Add(1)
		return out, false
	}
	if req.Sender == probe.FromCCM {
		r.heard(req, now)
	}
	return r.reply(out, req, now)
}

// refuse logs a request made with another key, and answers it with a refusal, once a
// second at most: enough for a ccm to say why the agent does not answer, too little to
// reflect anything.
func (r *Responder) refuse(out []byte, nonce uint64) ([]byte, bool) {
	r.authLog.Log("Probe requests made with another probe key: the ccm and this agent must share one (--probe-key-file)", "node", r.node)
	if !r.refusals.Allow() {
		return out, false
	}
	return probe.AppendRefusal(out, nonce), true
}

// heard takes a fresh ccm request as a sign of its life if it echoes a recent challenge
// and is of the instance followed (or may be followed now), and the newest of them as
// what that ccm's verdict and the agent's duty are.
func (r *Responder) heard(req probe.Request, now time.Time) {
	if f := r.heardLocked(req, now); f != nil {
		f()
	}
}

// heardLocked is heard, under the lock; it returns the function registered by
// OnExpected when the expected digest changed, to call once the lock is let go.
func (r *Responder) heardLocked(req probe.Request, now time.Time) (onExpected func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The challenge echoed was sent with the reply to the request before this one, which
	// promised the same gap as this one: an agent that just started takes it from there.
	if !r.challenges.echoed(req.Echo, now, probe.Gap(r.interval, req.Idle)) {
		return nil
	}
	was := r.follow.instance
	followed, newest := r.follow.take(req.Instance, req.Counter, now, probe.Gap(r.interval, r.idle))
	if !followed {
		return nil
	}
	if was != req.Instance {
		klog.InfoS("Following a ccm", "instance", req.Instance, "before", was)
	}
	if newest {
		r.newestVerdict = probe.VerdictRef{Instance: req.Instance, Seq: req.Verdict}
		if req.Duty != r.expected || req.DutyKnown != r.expectedKnown {
			onExpected = r.onExpected
		}
		r.expected, r.expectedKnown = req.Duty, req.DutyKnown
		r.idle = req.Idle
	}
	r.lastCCM.Store(now.UnixNano())
	return onExpected
}

// reply appends the reply to req to b, and reports whether there is one to send.
func (r *Responder) reply(b []byte, req probe.Request, now time.Time) ([]byte, bool) {
	r.mu.Lock()
	reply := probe.Reply{Nonce: req.Nonce, Challenge: r.challenges.current(now, probe.Gap(r.interval, req.Idle)), State: r.State(), Node: r.node, StandsDown: r.standsDown, Verdict: r.verdict.VerdictRef,
		ConfirmedOnly: r.confirmedOnly, Digest: r.digest, TakesIdle: true}
	// The request's counter turns the shares: each prober's counters for this node are
	// consecutive, so each prober gets every share in turn however many probe the node.
	r.lists.Fill(&reply, req.Counter)
	r.mu.Unlock()
	reply.CacheVersion = r.CacheVersion()
	out, err := r.key.AppendReply(b, reply)
	if err != nil {
		// Never: the name and lists were checked when set, and fill makes the shares fit.
		klog.ErrorS(err, "Cannot encode a probe reply", "node", r.node)
		return b, false
	}
	return out, true
}

// rejected counts a datagram that did not parse, and reports whether err says it did not.
func (r *Responder) rejected(err error) bool {
	switch {
	case errors.Is(err, probe.ErrAuth):
		r.unauthenticated.Add(1)
	case errors.Is(err, probe.ErrSignature):
		r.unsigned.Add(1)
		r.signLog.Log("Verdicts or duty lists made with the probe key but not signed by the ccm: forged by someone who holds the probe key, or signed with a key this agent does not hold (--verdict-public-key-file)", "node", r.node)
	case err != nil:
		r.malformed.Add(1)
	default:
		return false
	}
	return true
}

// takeVerdict takes a signed verdict of the ccm followed that replaces the one held, once
// all its parts are in.
func (r *Responder) takeVerdict(b []byte) {
	p, err := r.key.ParseFreshVerdict(r.ccm, b, r.newVerdict)
	if errors.Is(err, probe.ErrStale) {
		r.staleVerdicts.Add(1)
		return
	}
	if r.rejected(err) {
		return
	}
	r.mu.Lock()
	// Asked again: another verdict may have been taken meanwhile.
	if !r.newVerdictLocked(p.VerdictRef) {
		r.mu.Unlock()
		r.staleVerdicts.Add(1)
		return
	}
	down, whole := r.verdictParts.add(p.Instance, p.Seq, p.Part, p.Parts, p.Down)
	if !whole {
		r.mu.Unlock()
		return
	}
	r.verdict = probe.Verdict{VerdictRef: p.VerdictRef, Down: down}
	f := r.onVerdict
	r.mu.Unlock()
	r.verdicts.Add(1)
	if f != nil {
		f()
	}
}

// newVerdict reports whether a verdict ref is one to take: of the ccm followed, and
// newer than the one held.
func (r *Responder) newVerdict(ref probe.VerdictRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newVerdictLocked(ref)
}

func (r *Responder) newVerdictLocked(ref probe.VerdictRef) bool {
	return ref.Instance == r.follow.instance && ref.Replaces(r.verdict.VerdictRef)
}

// SetView sets what the following replies say of the agent's own view: the digest of the
// addresses it gives the agent, and whether the agent announces only what the ccm's duty
// confirms.
func (r *Responder) SetView(digest probe.Digest, confirmedOnly bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.digest, r.confirmedOnly = digest, confirmedOnly
}

// SetUnable sets the pools and families the following replies say the agent cannot
// announce now. Only the first MaxUnable valid ones, in order of pool and family, count;
// replies carry them in shares when they do not fit in one.
func (r *Responder) SetUnable(u []probe.Unable) {
	u = slices.DeleteFunc(slices.Clone(u), func(x probe.Unable) bool { return x.Check() != nil })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists.SetUnable(u)
}

// Expected returns the duty digest the newest ccm request carried, and whether that ccm
// knew one.
func (r *Responder) Expected() (probe.Digest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expected, r.expectedKnown
}

// Duty returns the newest duty list taken, or nil before the first.
func (r *Responder) Duty() *probe.Duty {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.duty
}

// newDuty reports whether a duty, by its head, is one to take: for this node, of the ccm
// followed, with the digest that ccm's newest request expects, and newer than the one held.
func (r *Responder) newDuty(d probe.Duty) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newDutyLocked(d)
}

func (r *Responder) newDutyLocked(d probe.Duty) bool {
	return d.To == r.tag && d.Instance == r.follow.instance && r.expectedKnown && d.Digest == r.expected &&
		(r.duty == nil || r.duty.Instance != d.Instance || d.Seq > r.duty.Seq)
}

// OnExpected registers f to be called whenever the duty digest the ccm's newest request
// expects, or whether that ccm knows one, changes. Call it before Serve.
func (r *Responder) OnExpected(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onExpected = f
}

// OnDuty registers f to be called after every duty list taken. Call it before Serve.
func (r *Responder) OnDuty(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onDuty = f
}

// takeDuty takes a signed duty datagram of the ccm followed, for this node, newer than the
// list held, whose digest is the one that ccm's newest request said to expect: the parts
// of a list are gathered until it is whole. So a duty sent to another node, an older one
// arriving late, or one of another ccm, counts for nothing.
func (r *Responder) takeDuty(b []byte) {
	p, err := r.key.ParseFreshDuty(r.ccm, b, r.newDuty)
	if errors.Is(err, probe.ErrStale) || r.rejected(err) {
		return
	}
	r.mu.Lock()
	if !r.newDutyLocked(p.Duty) {
		r.mu.Unlock()
		return
	}
	addrs, whole := r.dutyParts.add(p.Instance, p.Seq, p.Part, p.Parts, p.Addrs)
	if !whole || probe.DigestOf(addrs) != p.Digest {
		r.mu.Unlock()
		return
	}
	d := p.Duty
	d.Addrs = addrs
	r.duty = &d
	f := r.onDuty
	r.mu.Unlock()
	if f != nil {
		f()
	}
}
