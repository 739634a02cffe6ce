// Package traffic is the client and server side of the failover measurements: a server
// that names its node, an open-loop client, and the arithmetic of an outage.
package traffic

import (
	"bufio"
	"context"
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

// DialFunc opens a connection, as net.Dialer.DialContext does; a test passes one that
// dials from inside a client's network namespace.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Reach connects to addr and returns the name the server there sent.
func Reach(ctx context.Context, dial DialFunc, addr netip.AddrPort) (string, error) {
	conn, err := dial(ctx, "tcp", addr.String())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// Request is one request of a Client.
type Request struct {
	// Start is when the request was sent.
	Start time.Time
	// OK says the server answered within the timeout.
	OK bool
	// Node is the name the server sent.
	Node string
}

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
				node, err := Reach(ctx, dial, addr)
				r.OK, r.Node = err == nil, node
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
		case recovered && !r.OK:
			stray++
		case recovered:
		case r.OK:
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
