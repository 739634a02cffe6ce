package peers

import (
	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// lateRing is how many missed probes of a peer a late answer may still be matched to.
const lateRing = 4

// leastSleep is how long a probe whose answer may wait unread in the socket is given
// again, while this process is behind in reading.
const leastSleep = 2 * time.Millisecond

// run is one Run's probing: its socket, its instance, and the probes out. Its maps and
// the peers' fields are guarded by the Prober's mu.
type run struct {
	p    *Prober
	ctx  context.Context
	conn *net.UDPConn
	// echo asks the nodes of peers that miss probes whether their kernels answer; nil
	// when no ICMP socket could be opened.
	echo *liveness.Echoer
	// instance is chosen at random for the run: the peers' replay windows are per
	// instance. epoch is the origin of the peers' phases.
	instance uint64
	epoch    time.Time
	// timeout is the time an answer may take, rapid the time between the probes of a
	// peer that missed one.
	timeout, rapid time.Duration
	rule           liveness.Rule
	// nonces are random nonces no one can predict: a reply can then only be made, or
	// replayed, by whoever holds the key and saw the request.
	nonces  *rand.ChaCha8
	pending map[uint64]*peer // probes out, by nonce
	late    map[uint64]*peer // the last missed probes of each peer, by nonce
	authLog probe.AuthLog
}

// peer is the probing of one peer's agent.
type peer struct {
	node  string
	addr  netip.AddrPort
	tag   uint64
	phase time.Duration
	// stop is closed when the peer is probed no more; ended carries the outcome of the
	// probe out, from whoever ended it: the reader, or the probe's own deadline.
	stop  chan struct{}
	ended chan liveness.Outcome

	// Guarded by Prober.mu.
	health liveness.Health
	state  liveness.State // as the listeners were told
	// covers are the NodeTags of the nodes the peer says it stands in for, as
	// coverGather puts them together from the shares its replies carry.
	covers       []uint64
	coverGather  *probe.Gather[uint64]
	cacheVersion uint64
	lastAnswer   time.Time
	// counter is the last counter of a request to the peer, challenge the challenge of
	// its last reply, which the next request echoes.
	counter, challenge uint64
	// nonce is the probe out, 0 when none; aliveSign says a sign of life came while it
	// was out.
	nonce     uint64
	aliveSign bool
	late      [lateRing]uint64
	next      int
	// sendErrs counts the attempts in a row whose probe could not be sent.
	sendErrs int
}

func newPeer(node string, addr netip.AddrPort) *peer {
	return &peer{node: node, addr: addr, tag: probe.NodeTag(node), stop: make(chan struct{}), ended: make(chan liveness.Outcome, 1), coverGather: probe.NewCoverGather()}
}

// newRun opens the sockets of a run of p that lasts as long as ctx.
func newRun(ctx context.Context, p *Prober) (*run, error) {
	// Dual-stack: the peers' addresses are IPv4 or IPv6.
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	if err := liveness.RecvErrors(conn); err != nil {
		klog.ErrorS(err, "Cannot hear of ICMP port unreachable on the socket that probes peers: a peer's agent gone from a live node is taken for down only after failover.busyTimeout")
	}
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux
	r := &run{
		p: p, ctx: ctx, conn: conn, instance: probe.NewInstance(), epoch: time.Now(),
		timeout: p.cfg.ProbeInterval / 4, rapid: min(liveness.RapidInterval, p.cfg.ProbeInterval), rule: liveness.RuleOf(p.cfg),
		nonces: rand.NewChaCha8(seed), pending: map[uint64]*peer{}, late: map[uint64]*peer{},
	}
	if r.echo, err = liveness.OpenEchoer(); err != nil {
		klog.ErrorS(err, "Cannot send ICMP echo requests; a peer that misses its probes is taken for down as a dead node is, even when its node is only busy")
	}
	return r, nil
}

func (r *run) close() {
	r.conn.Close()
	if r.echo != nil {
		r.echo.Close()
	}
}

// forgetLocked forgets the probes of pr, which is probed no more.
func (r *run) forgetLocked(pr *peer) {
	delete(r.pending, pr.nonce)
	for _, nonce := range pr.late {
		if r.late[nonce] == pr {
			delete(r.late, nonce)
		}
	}
}

// probe probes pr until it is forgotten: the first probe at once, as a peer is probed
// because no ccm is heard and its place in the cycle could add up to an interval to a
// takeover; then at its place in the cycle, or rapidly while it is suspect.
func (r *run) probe(pr *peer) {
	pr.phase = cycle.Phase(pr.node, r.p.cfg.ProbeInterval)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := time.Now()
	for {
		timer.Reset(time.Until(next))
		select {
		case <-pr.stop:
			return
		case <-timer.C:
		}
		o, sent, sendErr, ok := r.once(pr, timer)
		if !ok {
			return
		}
		r.judge(pr, o, sendErr)
		next = r.next(pr, sent, sendErr)
	}
}

// once sends pr one probe and returns its outcome, when it was sent, and whether it could
// not be sent; ok is false when pr was forgotten meanwhile.
func (r *run) once(pr *peer, timer *time.Timer) (o liveness.Outcome, sent time.Time, sendErr, ok bool) {
	p := r.p
	p.mu.Lock()
	nonce := r.nonces.Uint64() | 1
	pr.nonce, pr.aliveSign = nonce, false
	r.pending[nonce] = pr
	pr.counter++
	req := probe.Request{Nonce: nonce, Sender: probe.FromAgent, Instance: r.instance, Counter: pr.counter, To: pr.tag, Echo: pr.challenge}
	echo := pr.health.Misses > 0 && r.echo != nil
	wait := r.timeout
	if pr.health.Suspect() {
		wait = r.rapid
	}
	p.mu.Unlock()

	sent = time.Now()
	if echo {
		_ = r.echo.Send(pr.addr.Addr(), nonce)
	}
	if _, err := r.conn.WriteToUDPAddrPort(p.key.AppendRequest(nil, req), pr.addr); err != nil {
		p.mu.Lock()
		delete(r.pending, nonce)
		pr.nonce = 0
		if pr.sendErrs++; pr.sendErrs == 1 {
			klog.ErrorS(err, "Cannot send a probe to a peer; trying again with backoff", "node", pr.node, "address", pr.addr)
		}
		p.mu.Unlock()
		return liveness.Missed, sent, true, true
	}
	deadline, extended := sent.Add(wait), false
	for {
		timer.Reset(time.Until(deadline))
		select {
		case o := <-pr.ended:
			return o, sent, false, true
		case <-pr.stop:
			return 0, sent, false, false
		case <-timer.C:
		}
		now := time.Now()
		switch {
		case !extended && now.Sub(deadline) > r.timeout:
			// This process had no CPU (a saturated node): the answer may not have come
			// yet, the peer being as short of it. Once more, from now.
			deadline, extended = now.Add(r.timeout), true
			continue
		case now.Sub(deadline) < r.p.cfg.ProbeInterval && liveness.Unread(r.conn) > 0:
			// Behind in reading answers: the one to this probe may wait in the socket.
			deadline = now.Add(leastSleep)
			continue
		}
		p.mu.Lock()
		if r.pending[nonce] != pr {
			p.mu.Unlock()
			select { // the reader ended it meanwhile
			case o := <-pr.ended:
				return o, sent, false, true
			case <-pr.stop:
				return 0, sent, false, false
			}
		}
		delete(r.pending, nonce)
		pr.nonce = 0
		o = liveness.Missed
		if pr.aliveSign {
			o = liveness.Busy
		}
		if old := pr.late[pr.next]; old != 0 {
			delete(r.late, old)
		}
		pr.late[pr.next], pr.next = nonce, (pr.next+1)%lateRing
		r.late[nonce] = pr
		p.mu.Unlock()
		return o, sent, false, true
	}
}

// judge takes the outcome of pr's last probe, sent or not, and tells the listeners when
// pr's state changed.
func (r *run) judge(pr *peer, o liveness.Outcome, sendErr bool) {
	p := r.p
	p.mu.Lock()
	if p.peers[pr.node] != pr {
		p.mu.Unlock()
		return
	}
	if !sendErr {
		pr.sendErrs = 0
	}
	pr.health.Observe(o, time.Now(), r.rule)
	was := pr.state
	pr.state = pr.health.State
	if pr.state == liveness.Down && was != liveness.Down {
		// A dead agent stands in for no one; if it answers again, its list is gathered
		// anew.
		pr.covers, pr.coverGather = nil, probe.NewCoverGather()
	}
	p.mu.Unlock()
	if pr.state != was {
		klog.InfoS("Peer's agent state changed", "node", pr.node, "state", pr.state, "lastProbe", o)
		p.notify(pr.node)
	}
}

// next returns when pr's next probe goes, its last one sent at sent.
func (r *run) next(pr *peer, sent time.Time, sendErr bool) time.Time {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var next time.Time
	switch {
	case sendErr && pr.health.State == liveness.Down:
		next = now.Add(liveness.Backoff(pr.sendErrs, p.cfg.FailureThreshold, p.cfg.ProbeInterval))
	case pr.health.Suspect():
		next = sent.Add(r.rapid)
	default:
		// Back to its place in the cycle, at least half an interval on.
		next = cycle.Next(r.epoch, sent.Add(p.cfg.ProbeInterval/2), pr.phase, p.cfg.ProbeInterval)
	}
	if next.Before(now) {
		return now
	}
	return next
}

// read takes the replies arriving on the socket until it is closed. Anything
// unauthenticated or malformed is skipped; a reply counts only for the probe whose nonce
// it carries.
func (r *run) read() {
	buf := make([]byte, probe.MaxDatagram)
	for {
		n, _, err := r.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if liveness.AsyncError(err) {
			liveness.DrainErrors(r.conn, probe.RequestLen+1, r.unreachable)
		}
		if err == nil {
			r.take(buf[:n])
		}
	}
}

// take takes one datagram.
func (r *run) take(b []byte) {
	p := r.p
	if nonce, err := probe.ParseRefusal(b); err == nil {
		p.mu.Lock()
		pr := r.pending[nonce]
		p.mu.Unlock()
		if pr != nil {
			r.authLog.Log("Peer refuses this agent's probes as made with another probe key: every agent and the ccm must share one (--probe-key-file)", "node", pr.node, "address", pr.addr)
		}
		return
	}
	reply, err := p.key.ParseReply(b)
	if err != nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	pr := r.pending[reply.Nonce]
	if pr == nil {
		// Late, its probe taken for a miss (the peer lives, busy), or a stray.
		if pr := r.late[reply.Nonce]; pr != nil && pr.node == reply.Node {
			delete(r.late, reply.Nonce)
			pr.health.Alive(now)
			pr.aliveSign = pr.nonce != 0
		}
		p.mu.Unlock()
		return
	}
	delete(r.pending, reply.Nonce)
	pr.nonce = 0
	if reply.Node != pr.node {
		// Another node's agent at this node's address: nothing it says is this node's.
		p.mu.Unlock()
		klog.V(2).InfoS("Probe of a peer answered by another node's agent", "node", pr.node, "answeredBy", reply.Node)
		pr.ended <- liveness.Missed
		return
	}
	pr.challenge, pr.cacheVersion, pr.lastAnswer = reply.Challenge, reply.CacheVersion, now
	covered := pr.coverGather.Take(reply.Covers, reply.CoverSum)
	if covered {
		pr.covers = pr.coverGather.Items()
	}
	covers := len(pr.covers)
	p.mu.Unlock()
	if covered {
		klog.V(2).InfoS("Peer stands in for other nodes", "node", pr.node, "covers", covers)
		p.notify(pr.node)
	}
	o := liveness.AnsweredReady
	switch reply.State {
	case probe.Draining:
		o = liveness.AnsweredDraining
	case probe.Starting:
		o = liveness.AnsweredStarting
	}
	pr.ended <- o
}

// echoed takes an echo reply from addr carrying nonce: the node of the probe with that
// nonce, if it is out and was sent to addr, lives.
func (r *run) echoed(from netip.Addr, nonce uint64) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if pr := r.pending[nonce]; pr != nil && pr.addr.Addr().Unmap() == from {
		pr.aliveSign = true
	}
}

// unreachable takes the request a port unreachable answered: the probe it is, if still
// out, ends refused, since no agent listens at the peer's address.
func (r *run) unreachable(b []byte) {
	req, err := r.p.key.ParseRequest(b)
	if err != nil {
		return
	}
	r.p.mu.Lock()
	pr := r.pending[req.Nonce]
	if pr == nil {
		r.p.mu.Unlock()
		return
	}
	delete(r.pending, req.Nonce)
	pr.nonce = 0
	r.p.mu.Unlock()
	pr.ended <- liveness.Refused
}
