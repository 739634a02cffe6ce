package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/cycle"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// sockets is how many UDP sockets the ccm probes from, each with one reader: a few, for
// thousands of agents, so that replies are read in batches on more than one core.
const sockets = 2

// maxLeastSleep bounds the shortest wait of the scheduler (sched.leastSleep): waking up
// for every one of thousands of probes would cost more than the probes, and each wake-up
// costs its system calls and goroutine switches whatever its batch holds. Probes are sent
// at most this late, and a miss is taken at most this late, which only lengthens the time
// an answer may take; a tenth of the answer's own time at most, for short intervals.
const maxLeastSleep = 2 * time.Millisecond

// readBuffer is the receive buffer asked for each socket.
const readBuffer = 4 << 20

// sched probes the agents of one Run from a few unconnected UDP sockets: one goroutine
// sends the probes, each agent at its own phase of the interval, and takes a probe out
// past its deadline for a miss; one reader per socket matches replies to the probes out
// by their nonce. An unconnected socket sees no ICMP port unreachable: a node whose agent
// is gone is found by its missed probes, as a dead node is, not at the first probe.
type sched struct {
	p     *Prober
	cfg   config.Failover
	conns []*net.UDPConn
	// emptied is, for each socket, when its reader last began a read that left it empty
	// (Unix nanoseconds), published once it took what that read returned.
	emptied []atomic.Int64
	// writers batch the probes of each socket; only the scheduler's loop uses them.
	writers []*writer
	// epoch is the origin of the agents' phases.
	epoch time.Time
	// timeout is the time an answer may take; rapid the time between the probes of an
	// agent that missed one; leastSleep the scheduler's shortest wait.
	timeout, rapid, leastSleep time.Duration
	// share is the share of the agents that must be lost at once for the prober to take
	// it for its own isolation.
	share float64
	live  liveness.Rule
	wake  chan struct{}
	// echo asks the nodes of agents that miss probes whether their kernels answer; nil
	// when no ICMP socket could be opened.
	echo *liveness.Echoer

	mu      sync.Mutex
	heap    dueHeap
	agents  map[*agentProbe]bool
	pending map[uint64]*agentProbe // probes out, by nonce
	// late are the agents of the last few missed probes of each, by nonce: an answer to
	// one of them, late, says the agent lives.
	late map[uint64]*agentProbe
	// nonces are fresh random nonces, from a generator no one can predict: a reply can
	// then only be made, or replayed, by whoever holds the key and saw the request.
	nonces   *rand.ChaCha8
	effects  []effect
	iso      isolation
	sendErrs sendErrors
	// plans are the duty tracker's, nil when there is none; planned the nodes named
	// as the scheduler last took them.
	plans   Plans
	planned *Planned
}

// newSched opens the sockets of a Run.
func newSched(p *Prober) (*sched, error) {
	s := &sched{
		p: p, cfg: p.cfg, epoch: time.Now(), wake: make(chan struct{}, 1),
		timeout: p.cfg.ProbeInterval / 4, rapid: min(liveness.RapidInterval, p.cfg.ProbeInterval), leastSleep: min(maxLeastSleep, p.cfg.ProbeInterval/40),
		live: liveness.RuleOf(p.cfg), agents: map[*agentProbe]bool{}, pending: map[uint64]*agentProbe{}, late: map[uint64]*agentProbe{},
		iso: isolation{lost: map[*agentProbe]bool{}, gated: map[*agentProbe]bool{}},
	}
	if p.duties != nil {
		s.plans = p.duties
	}
	s.share = p.cfg.IsolationShare
	if s.share == 0 {
		s.share = config.DefaultIsolationShare
	}
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux
	s.nonces = rand.NewChaCha8(seed)
	s.emptied = make([]atomic.Int64, sockets)
	for range sockets {
		// Dual-stack: the agents' addresses are IPv4 or IPv6.
		conn, err := net.ListenUDP("udp", nil)
		if err != nil {
			s.close()
			return nil, err
		}
		// Room for a few intervals' answers, should this process fall behind in reading
		// them: the kernel caps it at net.core.rmem_max.
		_ = conn.SetReadBuffer(readBuffer)
		s.conns = append(s.conns, conn)
		if err := liveness.RecvErrors(conn); err != nil {
			klog.ErrorS(err, "Cannot hear of ICMP port unreachable on the probe socket: an agent gone from a live node is taken for down only after failover.busyTimeout")
		}
		w, err := newWriter(conn)
		if err != nil {
			s.close()
			return nil, err
		}
		w.asyncErr = func() { s.drain(conn) }
		s.writers = append(s.writers, w)
	}
	echo, err := liveness.OpenEchoer()
	if err != nil {
		klog.ErrorS(err, "Cannot send ICMP echo requests; an agent that misses its probes is taken for down as a dead node is, even when its node is only busy. Allow this process ICMP sockets (net.ipv4.ping_group_range) or give it CAP_NET_RAW")
	}
	s.echo = echo
	return s, nil
}

func (s *sched) close() {
	for _, c := range s.conns {
		c.Close()
	}
	if s.echo != nil {
		s.echo.Close()
	}
}

// add starts probing a, at its place in the cycle: the first probes of thousands of
// agents keep their places, spread over the interval.
func (s *sched) add(a *agentProbe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	a.idx, a.phase = -1, cycle.Phase(a.node, s.cfg.ProbeInterval)
	a.idlePhase = cycle.Phase(a.node, probe.Gap(s.cfg.ProbeInterval, true))
	s.agents[a] = true
	s.setDueLocked(a, cycle.Next(s.epoch, now, a.phase, s.cfg.ProbeInterval))
}

// remove stops probing a. p.mu may be held: what the removal changes (the census it
// completes, an isolation it ends) is left for the scheduler's loop to take.
func (s *sched) remove(a *agentProbe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.removed = true
	s.unscheduleLocked(a)
	if a.out {
		delete(s.pending, a.nonce)
	}
	wasBusy := a.busyEpisode()
	s.setIdleLocked(a, false)
	delete(s.agents, a)
	s.forgetLocked(a)
	s.forgetLateLocked(a)
	s.busyChangedLocked(a, wasBusy, time.Now())
	s.judgeLocked(time.Now())
	if len(s.effects) > 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// run sends the probes and takes the misses until ctx ends.
func (s *sched) run(ctx context.Context) {
	defer s.close()
	for i, c := range s.conns {
		go s.read(i, c)
	}
	if s.echo != nil {
		s.echo.Read(s.echoed)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var jobs []job
	batches := make([][]job, len(s.conns)) // the jobs in each writer's batch, in order
	unread := make([]int, len(s.conns))    // each socket's first datagram waiting, -1 when not asked yet
	var wakeAt time.Time                   // when the loop meant to run again at the latest
	for ctx.Err() == nil {
		s.mu.Lock()
		now := time.Now()
		if !wakeAt.IsZero() && now.Sub(wakeAt) > s.timeout {
			s.resumeLocked(wakeAt, now)
		}
		s.sendErrs.flush(now)
		s.replanLocked(now)
		jobs = jobs[:0]
		for i := range unread {
			unread[i] = -1
		}
		for len(s.heap) > 0 && !s.heap[0].due.After(now) {
			a := s.heap[0]
			if a.out {
				if now.Sub(a.deadline) < s.cfg.ProbeInterval && s.behind(a, unread) {
					// This process is behind in reading answers (a busy host, thousands
					// of answers after a stall or a census), and the one to a.nonce may
					// wait in its socket. Not a miss yet, for up to an interval.
					s.setDueLocked(a, now.Add(s.leastSleep))
					continue
				}
				delete(s.pending, a.nonce)
				a.out = false
				s.lateLocked(a)
				o := liveness.Missed
				if a.aliveSign {
					o = liveness.Busy
				}
				s.endLocked(a, o, now, 0, false)
				continue
			}
			a.out, a.nonce, a.sent, a.extended, a.aliveSign = true, s.nonces.Uint64(), now, false, false
			s.pending[a.nonce] = a
			wait := s.timeout
			if a.health.Suspect() && !s.iso.isolated {
				wait = s.rapid
			}
			a.deadline = now.Add(wait)
			s.setDueLocked(a, a.deadline)
			s.setIdleLocked(a, s.idleLocked(a))
			// An agent that missed a probe has its node asked too, with this probe's
			// nonce.
			jobs = append(jobs, job{a, a.nonce, a.health.Misses > 0 && s.echo != nil, a.idle})
		}
		sleep := time.Hour
		if len(s.heap) > 0 {
			sleep = max(time.Until(s.heap[0].due), s.leastSleep)
		}
		effects := s.takeEffectsLocked()
		s.mu.Unlock()
		s.p.apply(effects)
		s.send(jobs, batches)
		timer.Reset(sleep)
		wakeAt = now.Add(sleep)
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// resumeLocked gives every probe out the time an answer may take again, counted from
// now, when the loop ran only now though it was due at wakeAt, later by more than that
// time: this process had no CPU (a saturated host, a stopped virtual machine), and the
// agents, on the same host or the same hypervisor, likely none either, so their answers
// may not have come yet. Taking those probes for misses would take a stall of this
// process for the agents' death, which the isolation rule cannot tell when it hits one
// agent's probe. Each probe is put back at most once, so that an agent that died
// meanwhile is found at most one timeout and the stall later.
func (s *sched) resumeLocked(wakeAt, now time.Time) {
	deadline := now.Add(s.timeout)
	extended := 0
	for _, a := range s.pending {
		if a.extended || !a.deadline.Before(deadline) {
			continue
		}
		a.deadline, a.extended = deadline, true
		s.setDueLocked(a, deadline)
		extended++
	}
	proberStalls.Inc()
	klog.V(2).InfoS("Prober ran late; the probes out wait again", "late", now.Sub(wakeAt), "probesOut", len(s.pending), "extended", extended)
}

// job is a probe to send, whether an echo request goes with it, and whether it says the
// agent is probed at the idle rate.
type job struct {
	a     *agentProbe
	nonce uint64
	echo  bool
	idle  bool
}

// send sends the probes of jobs, a batch per socket.
func (s *sched) send(jobs []job, batches [][]job) {
	probesSent.Add(float64(len(jobs)))
	flush := func(sock int) {
		b := batches[sock]
		s.writers[sock].flush(func(i int, err error) { s.sendFailed(b[i].nonce, err) })
		batches[sock] = b[:0]
	}
	for _, j := range jobs {
		if j.echo {
			if err := s.echo.Send(j.a.addr.Addr(), j.nonce); err == nil {
				echoesSent.Inc()
			}
		}
		r := s.p.request(j.a, j.nonce)
		r.Idle = j.idle
		w := s.writers[j.a.sock]
		if !w.fits(j.a.addr) {
			b := s.p.key.AppendRequest(nil, r)
			if _, err := s.conns[j.a.sock].WriteToUDPAddrPort(b, j.a.addr); err != nil {
				s.sendFailed(j.nonce, err)
			}
			continue
		}
		if w.buf() == nil {
			flush(j.a.sock)
		}
		w.add(s.p.key.AppendRequest(w.buf(), r), j.a.addr)
		batches[j.a.sock] = append(batches[j.a.sock], j)
	}
	for sock := range batches {
		flush(sock)
	}
}

// behind reports whether the answer to a's probe out, had it come by the deadline, may
// still wait unread: its socket's reader has not found the socket empty since, and the
// socket holds a datagram. Answers arriving all the time, as at thousands of agents, do
// not count: only a backlog older than the deadline does. unread caches each socket's
// first datagram waiting for one round of the scheduler.
func (s *sched) behind(a *agentProbe, unread []int) bool {
	if s.emptied[a.sock].Load() >= a.deadline.UnixNano() {
		return false
	}
	if unread[a.sock] < 0 {
		unread[a.sock] = liveness.Unread(s.conns[a.sock])
	}
	return unread[a.sock] > 0
}

// sendFailed takes a probe that could not be sent for a miss, and has the next ones
// retried with backoff once the agent is down: never given up.
func (s *sched) sendFailed(nonce uint64, err error) {
	s.endOut(nonce, func(a *agentProbe, now time.Time) {
		probeSendErrors.Inc()
		if a.sendErrs++; a.sendErrs == 1 {
			s.sendErrs.began(a.node, a.addr, err, now) // once per run of failures
		}
		s.endLocked(a, liveness.Missed, now, 0, true)
	})
}

// endOut ends the probe with nonce, if it is still out, as end says under s.mu, and
// applies what that changes.
func (s *sched) endOut(nonce uint64, end func(a *agentProbe, now time.Time)) {
	s.mu.Lock()
	a := s.pending[nonce]
	if a == nil || a.removed {
		s.mu.Unlock()
		return
	}
	delete(s.pending, nonce)
	a.out = false
	end(a, time.Now())
	effects := s.takeEffectsLocked()
	s.mu.Unlock()
	s.p.apply(effects)
}

// read takes the replies arriving on conn until it is closed. Anything unauthenticated
// or malformed is skipped; a reply is taken only if its nonce is that of a probe out.
func (s *sched) read(sock int, conn *net.UDPConn) {
	r, err := newReader(conn, probe.MaxDatagram)
	if err != nil {
		klog.ErrorS(err, "Cannot read probe replies")
		return
	}
	for {
		n, err := r.read()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if liveness.AsyncError(err) {
			s.drain(conn)
		}
		for i := range n {
			s.take(conn, r.datagram(i))
		}
		s.emptied[sock].Store(r.emptied.UnixNano())
	}
}

// take takes one datagram read from conn.
func (s *sched) take(conn *net.UDPConn, b []byte) {
	// The source address is not checked: the nonce is random and the reply
	// authenticated, and an agent on a host with several addresses may answer from
	// another one than it is probed at.
	if nonce, err := probe.ParseRefusal(b); err == nil {
		s.refused(nonce)
		return
	}
	reply, err := s.p.key.ParseReply(b)
	if errors.Is(err, probe.ErrAuth) {
		unauthenticatedReplies.Inc()
		return
	}
	if err != nil {
		return
	}
	a, sent, stale := s.answer(reply)
	if a == nil || reply.Node != a.node {
		// Another node's agent answered at this node's address (a miss, for this node):
		// nothing it says is this node's.
		return
	}
	a.challenge.Store(reply.Challenge)
	a.takesIdle.Store(reply.TakesIdle)
	if stale {
		s.resendVerdict(conn, a, sent)
	}
	for _, d := range s.p.dutyFor(a, reply) {
		_, _ = conn.WriteToUDPAddrPort(d, a.addr)
	}
}

// resendVerdict sends the verdict again to a's agent, whose reply to the probe sent at
// sent holds an older one, if it missed the broadcast.
func (s *sched) resendVerdict(conn *net.UDPConn, a *agentProbe, sent time.Time) {
	ref, parts := s.p.verdictParts()
	if !s.p.missedBroadcast(ref, sent) {
		return
	}
	for _, v := range parts {
		if _, err := conn.WriteToUDPAddrPort(v, a.addr); err != nil {
			return
		}
	}
	verdictsSent.Inc()
}

// refused logs and counts an agent's refusal of a probe it waits for: the agent has
// another probe key. The probe stays a miss.
func (s *sched) refused(nonce uint64) {
	s.mu.Lock()
	a := s.pending[nonce]
	s.mu.Unlock()
	if a == nil {
		return // a stray, or a forgery: the refusal carries no code
	}
	refusals.Inc()
	s.p.authLog.Log("Agent refuses the ccm's probes as made with another probe key: the ccm and the agents must share one (--probe-key-file)", "node", a.node, "address", a.addr)
}

// answer takes a reply, and returns its agent, when the probe answered was sent, and
// whether the agent holds an older verdict than the one sent.
func (s *sched) answer(r probe.Reply) (a *agentProbe, sent time.Time, stale bool) {
	now := time.Now()
	s.mu.Lock()
	a = s.pending[r.Nonce]
	if a == nil {
		// Late, its probe taken for a miss (the agent lives, busy), or a stray.
		if a := s.late[r.Nonce]; a != nil && a.node == r.Node {
			delete(s.late, r.Nonce)
			a.health.Alive(now)
			a.aliveSign = a.out
			lateAnswers.Inc()
		}
		s.mu.Unlock()
		return nil, time.Time{}, false
	}
	// Claimed: what the reply says of the agent is taken before its outcome, as the
	// verdict may depend on it (the nodes it stands in for), and outside the lock.
	delete(s.pending, r.Nonce)
	a.out, a.claimed = false, true
	s.unscheduleLocked(a)
	sent = a.sent
	rtt := now.Sub(sent)
	s.mu.Unlock()

	o := liveness.AnsweredReady
	switch {
	case r.Node != a.node:
		// Another node's agent at this node's address: not this node's agent.
		klog.V(2).InfoS("Probe answered by another node's agent", "node", a.node, "answeredBy", r.Node)
		o = liveness.Missed
	case r.State == probe.Draining:
		o = liveness.AnsweredDraining
	case r.State == probe.Starting:
		o = liveness.AnsweredStarting
	}
	if o != liveness.Missed {
		stale = s.p.answered(a.node, a, r)
		probeRTT.Observe(rtt.Seconds())
		a.lastRTT.Store(int64(rtt))
		a.lastAnswer.Store(now.UnixNano())
	}
	s.mu.Lock()
	a.claimed = false
	if !a.removed {
		s.endLocked(a, o, now, rtt, false)
	}
	effects := s.takeEffectsLocked()
	s.mu.Unlock()
	s.p.apply(effects)
	return a, sent, stale
}

// broadcast sends the verdict to every agent, each from its own socket, in batches.
func (s *sched) broadcast(to []*agentProbe) {
	ref, parts := s.p.verdictParts()
	if parts == nil {
		return
	}
	defer s.p.broadcastDone(ref)
	writers := make([]*writer, len(s.conns))
	failed := 0
	flush := func(w *writer) { w.flush(func(int, error) { failed++ }) }
	for _, a := range to {
		if writers[a.sock] == nil {
			w, err := newWriter(s.conns[a.sock])
			if err != nil {
				return // closed: the Run is over
			}
			writers[a.sock] = w
		}
		w := writers[a.sock]
		for _, v := range parts {
			if !w.fits(a.addr) {
				if _, err := s.conns[a.sock].WriteToUDPAddrPort(v, a.addr); err != nil {
					failed++
				}
				continue
			}
			if w.buf() == nil {
				flush(w)
			}
			w.add(append(w.buf(), v...), a.addr)
		}
	}
	for _, w := range writers {
		if w != nil {
			flush(w)
		}
	}
	verdictsSent.Add(float64(len(to) - failed/len(parts)))
}

// request returns the request to send to a's agent. Its counter is a's own, so that the
// agent's replay window sees consecutive counters however many agents are probed.
func (p *Prober) request(a *agentProbe, nonce uint64) probe.Request {
	p.mu.Lock()
	seq, instance, duties := p.verdict.Seq, p.instance, p.duties
	p.mu.Unlock()
	r := probe.Request{Nonce: nonce, Sender: probe.FromCCM, Instance: instance, Counter: a.counter.Add(1), To: a.tag, Echo: a.challenge.Load(), Verdict: seq}
	if duties != nil {
		r.Duty, r.DutyKnown = duties.Duty(a.node)
	}
	return r
}
