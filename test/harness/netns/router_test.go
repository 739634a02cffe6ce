package netns_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

func TestRouter(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	if err := n.AddRouter(); err != nil {
		t.Fatal(err)
	}
	if err := n.AddRouter(); err == nil {
		t.Error("a second AddRouter succeeded")
	}
	r := n.RoutedClient
	if r.IPv4 != netip.MustParseAddr("203.0.113.2") || r.IPv6 != netip.MustParseAddr("fd00:203:0:113::2") {
		t.Errorf("routed client at %s and %s, want 203.0.113.2 and fd00:203:0:113::2", r.IPv4, r.IPv6)
	}
	// Both ways, across the router, on both families: the nodes, the on-link client and
	// the bridge's namespace (where Forward listens) route the subnet via the router.
	for _, to := range []*netns.Host{n.Nodes[0], n.Nodes[1], n.Client, n.Bridge} {
		for _, dst := range []netip.Addr{to.IPv4, to.IPv6} {
			if err := r.Ping(dst, pingTimeout); err != nil {
				t.Errorf("routed → %s: %v", to.Label, err)
			}
		}
		for _, dst := range []netip.Addr{r.IPv4, r.IPv6} {
			if err := to.Ping(dst, pingTimeout); err != nil {
				t.Errorf("%s → routed: %v", to.Label, err)
			}
		}
	}
	// A node whose link went down and came back has its routes again, as a node's
	// network configuration puts them back: to the routed client, and to the other
	// node's pods.
	if err := n.Nodes[0].SetLink(false); err != nil {
		t.Fatal(err)
	}
	if err := n.Nodes[0].SetLink(true); err != nil {
		t.Fatal(err)
	}
	out, err := n.Nodes[0].Run(t.Context(), "ip", "route")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"203.0.113.0/24 via 198.18.0.253", n.Nodes[1].PodSubnet4.String() + " via " + n.Nodes[1].IPv4.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("node1's routes after its link came back lack %q:\n%s", want, out)
		}
	}
	if err := n.Nodes[0].Ping(r.IPv4, pingTimeout); err != nil {
		t.Errorf("node1 → routed, after its link came back: %v", err)
	}
	// The router resolved node1 on the segment: the entry a failover must change.
	if mac, _, err := n.Router.Neighbor(n.Nodes[0].IPv4); err != nil || mac.String() != n.Nodes[0].MAC.String() {
		t.Errorf("the router's neighbour entry of node1: %v, %v; want %s", mac, err, n.Nodes[0].MAC)
	}
}

func TestServeConnect(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	// An echo server on node1, which the root namespace cannot reach.
	ln, err := n.Nodes[0].Listen("tcp", netip.AddrPortFrom(n.Nodes[0].IPv4, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, ln)
	sock := filepath.Join(t.TempDir(), "connect.sock")
	if err := n.ServeConnect(sock); err != nil {
		t.Fatal(err)
	}

	dial := func(t *testing.T, request string) (net.Conn, *bufio.Reader, *http.Response) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		in := bufio.NewReader(c)
		resp, err := http.ReadResponse(in, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, in, resp
	}

	// Bytes sent right behind the request, before the answer, reach the target too.
	target := ln.Addr().String()
	c, in, resp := dial(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly ", target, target))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", target, resp.Status)
	}
	if _, err := io.WriteString(c, "late\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(in)
	if err != nil || string(got) != "early late\n" {
		t.Errorf("echo through CONNECT: %q, %v; want %q", got, err, "early late\n")
	}

	// Anything but CONNECT is refused, and so is a target nobody listens on.
	if _, _, resp := dial(t, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET through the proxy: %s, want 405", resp.Status)
	}
	closed := netip.AddrPortFrom(n.Nodes[0].IPv4, 1).String()
	if _, _, resp := dial(t, "CONNECT "+closed+" HTTP/1.1\r\nHost: "+closed+"\r\n\r\n"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT %s, where nothing listens: %s, want 502", closed, resp.Status)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.ServeConnect(strings.TrimSuffix(sock, ".sock") + "2.sock"); err == nil {
		t.Error("ServeConnect on a closed network succeeded")
	}
}
