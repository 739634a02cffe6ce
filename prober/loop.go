package prober

import (
	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// probe probes one agent until ctx ends.
func (p *Prober) probe(ctx context.Context, node string, a *agentProbe) {
	addr := a.addr
	// A connected socket: an ICMP port unreachable, which says the node is there but its
	// agent is not, comes back as an error on it.
	interval := p.cfg.ProbeInterval
	health := agentHealth{}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	for err != nil {
		// No route to it now (this node's own link is down, say): down until a dial
		// works, tried again every interval.
		if health.state != Down {
			klog.ErrorS(err, "Cannot probe agent; trying again every probe interval", "node", node, "address", addr)
			health.state = Down
			p.transition(node, a, Down, missed, 0)
		}
		a.lastProbe.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	}
	context.AfterFunc(ctx, func() { conn.Close() })

	// An answer may take a quarter of an interval (25 ms by default): on a LAN it takes well
	// under a millisecond. A late answer costs nothing but rapid probes; only
	// failureThreshold misses in a row take the agent for dead.
	timeout := interval / 4
	rapid := min(rapidInterval, interval)
	// A fresh random nonce per probe, from a generator no one can predict: a reply can
	// then only be made, or replayed, by whoever holds the key and saw the request.
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux
	nonces := rand.NewChaCha8(seed)
	req := make([]byte, 0, probe.RequestLen)
	buf := make([]byte, probe.MaxDatagram)
	var verdict []byte
	sendVerdict := func() {
		if verdict = p.appendVerdict(verdict[:0]); verdict != nil {
			if _, err := conn.Write(verdict); err == nil {
				verdictsSent.Inc()
			}
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for ctx.Err() == nil {
		for wait := time.Until(next); wait > 0; wait = time.Until(next) {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-a.kick:
				sendVerdict()
				continue
			case <-timer.C:
			}
			break
		}
		nonce := nonces.Uint64()
		sent := time.Now()
		probesSent.Inc()
		o := missed
		var reply probe.Reply
		if _, err := conn.Write(p.key.AppendRequest(req[:0], p.request(node, nonce))); err != nil {
			o = refusedOr(err, missed)
		} else {
			wait := timeout
			if health.suspect() {
				wait = rapid
			}
			o, reply = p.await(conn, buf, nonce, node, sent.Add(wait))
		}
		if o.answered() {
			if p.answered(node, a, reply) {
				sendVerdict() // it holds an older one: it missed a verdict
			}
			for _, b := range p.dutyFor(node, reply) {
				_, _ = conn.Write(b)
			}
		}
		var rtt time.Duration
		if o.answered() {
			now := time.Now()
			rtt = now.Sub(sent)
			probeRTT.Observe(rtt.Seconds())
			a.lastRTT.Store(int64(rtt))
			a.lastAnswer.Store(now.UnixNano())
		}
		if health.observe(o, p.cfg.FailureThreshold) {
			p.transition(node, a, health.state, o, rtt)
		} else if health.misses == 1 {
			klog.V(4).InfoS("Agent missed a probe", "node", node, "outcome", o)
		}
		a.lastProbe.Store(time.Now().UnixNano())
		if health.suspect() {
			next = sent.Add(rapid)
		} else {
			next = sent.Add(interval)
		}
		if now := time.Now(); next.Before(now) {
			next = now
		}
	}
}

// request returns the next request to send to node's agent.
func (p *Prober) request(node string, nonce uint64) probe.Request {
	if p.sender != probe.FromCCM {
		return probe.Request{Nonce: nonce, Sender: p.sender}
	}
	p.mu.Lock()
	seq, instance, duties := p.verdict.Seq, p.instance, p.duties
	p.mu.Unlock()
	r := probe.Request{Nonce: nonce, Sender: p.sender, Instance: instance, Counter: p.counter.Add(1), Verdict: seq}
	if duties != nil {
		r.Duty, r.DutyKnown = duties.Duty(node)
	}
	return r
}

// await reads until the answer to nonce arrives or deadline passes. Answers to earlier
// probes, and anything malformed, are skipped.
func (p *Prober) await(conn *net.UDPConn, buf []byte, nonce uint64, node string, deadline time.Time) (outcome, probe.Reply) {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return missed, probe.Reply{}
	}
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return refusedOr(err, missed), probe.Reply{}
		}
		reply, err := p.key.ParseReply(buf[:n])
		if errors.Is(err, probe.ErrAuth) {
			unauthenticatedReplies.Inc()
			continue
		}
		if err != nil || reply.Nonce != nonce {
			continue
		}
		if reply.Node != node {
			// Another node's agent at this node's address: not this node's agent.
			klog.V(2).InfoS("Probe answered by another node's agent", "node", node, "answeredBy", reply.Node)
			return missed, probe.Reply{}
		}
		switch reply.State {
		case probe.Draining:
			return answeredDraining, reply
		case probe.Starting:
			return answeredStarting, reply
		}
		return answeredReady, reply
	}
}

func refusedOr(err error, o outcome) outcome {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return refused
	}
	return o
}
