// Package traffic is the client and server side of the failover measurements: a server
// that names its node, a pod's server that also names the pod and the client address it
// saw, an open-loop client, and the arithmetic of an outage.
package traffic

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Serve answers every connection on l with name and a newline, then closes it, until l is
// closed. It stands in for kube-proxy handing a Service's traffic to a pod on the node.
func Serve(l net.Listener, name string) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintln(conn, name)
		conn.Close()
	}
}

// ServePod answers every connection on l with one line naming the pod, its node and the
// address the connection came from, as Answer.String writes it, then closes it, until l
// is closed. It is a pod's server: what it says of the client tells a test whether the
// way in kept the client's address (externalTrafficPolicy Local) or replaced it with a
// node's (Cluster). pod and node must be non-empty and free of spaces and '=', as
// Kubernetes names are.
func ServePod(l net.Listener, pod, node string) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		a := Answer{Node: node, Pod: pod}
		if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
			// An IPv4 client of a socket that listens on both families shows as
			// ::ffff:a.b.c.d; a link-local one has a zone that says nothing here.
			a.Client = ap.Addr().Unmap().WithZone("")
		}
		fmt.Fprintln(conn, a)
		conn.Close()
	}
}

// Answer is what a server sent: the node's name from Serve; the pod, its node and the
// client address it saw from ServePod.
type Answer struct {
	// Node is the node that answered.
	Node string
	// Pod is the pod that answered; empty from Serve.
	Pod string
	// Client is the address the pod saw the connection come from; invalid from Serve.
	Client netip.Addr
}

// String returns the line a server sends, without the newline: the node's name, or
// pod=<pod> node=<node> client=<address> for a pod.
func (a Answer) String() string {
	if a.Pod == "" {
		return a.Node
	}
	return fmt.Sprintf("pod=%s node=%s client=%s", a.Pod, a.Node, a.Client)
}

// ParseAnswer parses a line that Serve or ServePod sent, without its newline. A line
// without '=' is a node's name, from Serve; one with is a pod's answer, which must have
// each of pod, node and client once, with a valid address, and nothing else.
func ParseAnswer(line string) (Answer, error) {
	if line == "" {
		return Answer{}, errors.New("parse answer: empty line")
	}
	if !strings.Contains(line, "=") {
		if strings.ContainsAny(line, " \t") {
			return Answer{}, fmt.Errorf("parse answer %q: a node's name has no spaces", line)
		}
		return Answer{Node: line}, nil
	}
	var a Answer
	seen := map[string]bool{}
	for _, f := range strings.Split(line, " ") {
		key, value, _ := strings.Cut(f, "=")
		if seen[key] {
			return Answer{}, fmt.Errorf("parse answer %q: %s given twice", line, key)
		}
		seen[key] = true
		if value == "" || strings.Contains(value, "=") {
			return Answer{}, fmt.Errorf("parse answer %q: field %q is not key=value", line, f)
		}
		switch key {
		case "pod":
			a.Pod = value
		case "node":
			a.Node = value
		case "client":
			addr, err := netip.ParseAddr(value)
			if err != nil {
				return Answer{}, fmt.Errorf("parse answer %q: client: %w", line, err)
			}
			a.Client = addr
		default:
			return Answer{}, fmt.Errorf("parse answer %q: unknown field %q", line, key)
		}
	}
	if !seen["pod"] || !seen["node"] || !seen["client"] {
		return Answer{}, fmt.Errorf("parse answer %q: want pod, node and client", line)
	}
	return a, nil
}

// DialFunc opens a connection, as net.Dialer.DialContext does; a test passes one that
// dials from inside a client's network namespace.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Reach connects to addr and returns the name of the node whose server answered, from
// Serve or ServePod.
func Reach(ctx context.Context, dial DialFunc, addr netip.AddrPort) (string, error) {
	a, err := Ask(ctx, dial, addr)
	return a.Node, err
}

// Ask connects to addr and returns what the server there sent, parsed.
func Ask(ctx context.Context, dial DialFunc, addr netip.AddrPort) (Answer, error) {
	conn, err := dial(ctx, "tcp", addr.String())
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return Answer{}, fmt.Errorf("set the deadline of the connection to %s: %w", addr, err)
		}
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return Answer{}, fmt.Errorf("read the answer of %s: %w", addr, err)
	}
	return ParseAnswer(strings.TrimSpace(line))
}

// AskUntil asks addr, a new connection every attempt at most, until a server answers or
// ctx ends, and returns the first answer. Each connection has its own source port: a
// connection whose first SYN reached a node before kube-proxy had the Service's rules is
// tracked there without them, so its retransmissions would never reach a pod.
func AskUntil(ctx context.Context, dial DialFunc, addr netip.AddrPort, attempt time.Duration) (Answer, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		a, err := Ask(actx, dial, addr)
		if err == nil {
			cancel()
			return a, nil
		}
		// A refused connection returns at once: pace the attempts.
		select {
		case <-actx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		cancel()
		if ctx.Err() != nil {
			return Answer{}, fmt.Errorf("ask %s: no answer before %w; the last attempt: %w", addr, ctx.Err(), err)
		}
	}
}

// Request is one request of a Client.
type Request struct {
	// Start is when the request was sent.
	Start time.Time
	// Err says why the server did not answer within the timeout; nil when it did.
	Err error
	// Node is the name of the node whose server answered, from Serve or ServePod.
	Node string
	// Pod is the pod that answered, and ClientAddr the client address it saw, when a
	// pod's server (ServePod) answered.
	Pod        string
	ClientAddr netip.Addr
}

// OK says the server answered within the timeout.
func (r Request) OK() bool { return r.Err == nil }

// Client sends a request every interval, each on a new connection with its own timeout,
// whether or not earlier ones have finished: an open loop. A client that waits for each
// answer before it sends the next hides most of an outage.
type Client struct {
	mu       sync.Mutex
	requests []Request
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// Start starts a Client of addr.
func Start(dial DialFunc, addr netip.AddrPort, interval, timeout time.Duration) *Client {
	c := &Client{stop: make(chan struct{})}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			c.done.Add(1)
			go func() {
				defer c.done.Done()
				r := Request{Start: time.Now()}
				ctx, cancel := context.WithDeadline(context.Background(), r.Start.Add(timeout))
				defer cancel()
				a, err := Ask(ctx, dial, addr)
				r.Err, r.Node, r.Pod, r.ClientAddr = err, a.Node, a.Pod, a.Client
				c.mu.Lock()
				c.requests = append(c.requests, r)
				c.mu.Unlock()
			}()
		}
	}()
	return c
}

// Requests returns the requests finished so far, in the order they were sent.
func (c *Client) Requests() []Request {
	c.mu.Lock()
	reqs := slices.Clone(c.requests)
	c.mu.Unlock()
	slices.SortFunc(reqs, func(a, b Request) int { return a.Start.Compare(b.Start) })
	return reqs
}

// Stop stops the client, waits for its requests to finish, and returns them in the order
// they were sent. Stopping a stopped client returns the same requests, so that a test
// can stop it in a deferred call too.
func (c *Client) Stop() []Request {
	c.stopOnce.Do(func() { close(c.stop) })
	c.done.Wait()
	return c.Requests()
}

// RecoveryStreak is how many successes in a row end an outage. A failure after such a
// streak is not part of the outage: a busy 2-core machine loses about one request in
// 5,000 to scheduling alone, and a lone loss long after traffic has recovered is one of
// those.
const RecoveryStreak = 20

// Outage returns the time from failure to the first success of a streak of RecoveryStreak
// successes (0 if nothing failed after failure), and how many requests failed after that
// streak, stray losses reported apart. recovered is false if no such streak came.
func Outage(reqs []Request, failure time.Time) (outage time.Duration, stray int, recovered bool) {
	var lastFail, firstOfStreak time.Time
	streak := 0
	for _, r := range reqs {
		if r.Start.Before(failure) {
			continue
		}
		switch {
		case recovered && !r.OK():
			stray++
		case recovered:
		case r.OK():
			if streak == 0 {
				firstOfStreak = r.Start
			}
			streak++
			recovered = streak >= RecoveryStreak
		default:
			streak, lastFail = 0, r.Start
		}
	}
	if !recovered || lastFail.IsZero() {
		return 0, stray, recovered
	}
	return firstOfStreak.Sub(failure), stray, true
}
