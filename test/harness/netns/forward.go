package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// dialTimeout bounds how long a forwarder tries to reach its target.
const dialTimeout = 10 * time.Second

// Forward makes target, a TCP address that the root namespace reaches, such as a test
// kube-apiserver on 127.0.0.1, reachable from the hosts of n, which cannot reach the root
// namespace's loopback. It listens on a free port of the bridge's IPv4 address and, for
// each connection, dials target from the root namespace and copies bytes both ways. It
// returns the address the hosts should dial instead of target. The forwarder lives until
// n is closed.
func (n *Network) Forward(target string) (netip.AddrPort, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return netip.AddrPort{}, fmt.Errorf("forward to %s: network is closed", target)
	}
	ln, err := n.Bridge.Listen("tcp", netip.AddrPortFrom(n.Bridge.IPv4, 0).String())
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("forward to %s: %w", target, err)
	}
	n.serve(ln, func(c net.Conn) (net.Conn, io.Reader, error) {
		// This goroutine is not locked to a thread that Do switched, so the dial comes
		// from the root namespace.
		up, err := net.DialTimeout("tcp", target, dialTimeout)
		return up, c, err
	})
	return netip.AddrPortFrom(n.Bridge.IPv4, uint16(ln.Addr().(*net.TCPAddr).Port)), nil
}

// ServeConnect serves HTTP CONNECT on the Unix socket path, from the root namespace, and
// dials each target asked for from the bridge's namespace, which reaches the nodes and
// their pods. It is what a kube-apiserver on the root namespace's loopback needs to reach
// the kubelets (logs, exec, port forwarding): its egress selector's cluster connection,
// with the HTTPConnect protocol over this socket. It serves until n is closed.
func (n *Network) ServeConnect(path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return fmt.Errorf("serve CONNECT on %s: network is closed", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("serve CONNECT: %w", err)
	}
	n.serve(ln, n.connect)
	return nil
}

// connect reads a CONNECT request from c, dials its target from the bridge's namespace and
// tells c so. What c sent after the request, already read into a buffer, goes first.
func (n *Network) connect(c net.Conn) (net.Conn, io.Reader, error) {
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	in := bufio.NewReader(c)
	req, err := http.ReadRequest(in)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\n\r\n")
		return nil, nil, fmt.Errorf("%s %s: only CONNECT is served", req.Method, req.Host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	up, err := n.Bridge.Dial(ctx, "tcp", req.Host)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
		return nil, nil, err
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return nil, nil, err
	}
	return up, in, nil
}

// serve starts a forwarder of the connections ln accepts, each to what connect returns
// for it. n.mu is held.
func (n *Network) serve(ln net.Listener, connect func(net.Conn) (up net.Conn, in io.Reader, err error)) {
	f := &forwarder{ln: ln, connect: connect, conns: make(map[net.Conn]struct{})}
	n.forwarders = append(n.forwarders, f)
	f.wg.Add(1)
	go f.serve()
}

// A forwarder copies the connections accepted by ln to and from the connection connect
// makes for each: it returns that connection and what to read of the accepted one, which
// holds what connect read of it and did not consume.
type forwarder struct {
	ln      net.Listener
	connect func(net.Conn) (up net.Conn, in io.Reader, err error)
	wg      sync.WaitGroup // serve and every connection's handle

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open connections, both sides
	closed bool
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Such as running out of file descriptors: wait for some to be closed.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f.wg.Add(1)
		go f.handle(c)
	}
}

// handle connects c to the target and copies both ways until both sides are done.
func (f *forwarder) handle(c net.Conn) {
	defer f.wg.Done()
	if !f.track(c) {
		return
	}
	defer f.untrack(c)
	up, in, err := f.connect(c)
	if err != nil {
		return
	}
	if !f.track(up) {
		return
	}
	defer f.untrack(up)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(up, in, c) }()
	go func() { defer wg.Done(); pipe(c, up, up) }()
	wg.Wait()
}

// pipe copies in, which reads src, to dst and then passes the end of the stream on. On an
// error it closes both, so that the other direction ends too.
func pipe(dst net.Conn, in io.Reader, src net.Conn) {
	if _, err := io.Copy(dst, in); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		// It fails only once the other direction has closed the connection: there is
		// then no stream left to end.
		_ = tc.CloseWrite()
	}
}

// track records an open connection, or closes it and returns false once f is closed.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

// untrack closes a connection that track recorded.
func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
	c.Close()
}

// close stops accepting, closes every open connection and waits until all goroutines
// of f are done.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	f.ln.Close()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
