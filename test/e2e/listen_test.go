package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

// probeAt sends from h one request made with the probe key, as a peer's, for node, to
// to, and reports whether an authenticated reply to it came back within a second.
func (c *cluster) probeAt(t testing.TB, h *netns.Host, node string, to netip.AddrPort) bool {
	t.Helper()
	nonce := rand.Uint64()
	req := c.Key.AppendRequest(nil, probe.Request{Nonce: nonce, Sender: probe.FromAgent, Instance: rand.Uint64() | 1, Counter: 1, To: probe.NodeTag(node)})
	answered := false
	err := h.Do(func() error {
		conn, err := net.ListenPacket("udp", ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.WriteTo(req, net.UDPAddrFromAddrPort(to)); err != nil {
			return err
		}
		b := make([]byte, probe.MaxDatagram)
		deadline := time.Now().Add(time.Second)
		for {
			if err := conn.SetReadDeadline(deadline); err != nil {
				return err
			}
			n, _, err := conn.ReadFrom(b)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				// An ICMP port unreachable, on some kernels, is the same as no answer.
				return nil
			}
			if r, err := c.Key.ParseReply(b[:n]); err == nil && r.Nonce == nonce {
				answered = true
				return nil
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return answered
}

// TestListenOnlyAtInternalIP: by default an agent listens for probes, and serves /metrics
// and the kubelet's probes, only at its Node's first InternalIP, where the ccm and the
// peers reach it: a valid probe sent to the node's other addresses (its second
// InternalIP, another address of the node, its loopback) gets no answer and /metrics
// is not served there, while the ccm sees the node up.
func TestListenOnlyAtInternalIP(t *testing.T) {
	c := newCluster(t, 2)
	h := c.Net.Nodes[0]
	// This node's agent again, with the defaults of both addresses (an empty flag is the
	// default) instead of the testbed's metrics address on loopback.
	if err := c.Agent(h.Label).Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartAgentArgs(h, "--metrics-address="); err != nil {
		t.Fatal(err)
	}
	// Another address of the node, as a host's public or storage network would give it;
	// gone with the test's namespace, and removed before.
	other := netip.MustParseAddr("198.18.0.180")
	if err := h.AddLocal(other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.DelLocal(other); err != nil {
			t.Errorf("remove %s from %s: %v", other, h.Label, err)
		}
	})
	get := func(from *netns.Host, at netip.Addr, path string) (int, error) {
		client := &http.Client{Transport: &http.Transport{DialContext: from.Dial, DisableKeepAlives: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		code, _, err := install.Get(ctx, client, "http://"+netip.AddrPortFrom(at, 7475).String()+path)
		return code, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, err := get(c.Net.Client, h.IPv4, "/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent of %s not ready at %s:7475 after 30 s (%d, %v):\n%s", h.Label, h.IPv4, code, err, c.Agent(h.Label).Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.startCCM(t)
	if _, err := c.WaitStatus(context.Background(), 10*time.Second, func(st *testbed.Status) (bool, string) {
		return st.Agent(h.Label) == "up", fmt.Sprintf("agent of %s is %q", h.Label, st.Agent(h.Label))
	}); err != nil {
		t.Fatal(err)
	}

	// The InternalIP answers: the request is one the agent takes.
	if !c.probeAt(t, c.Net.Client, h.Label, netip.AddrPortFrom(h.IPv4, 7474)) {
		t.Fatalf("no answer at %s, the first InternalIP of %s", h.IPv4, h.Label)
	}
	for _, tc := range []struct {
		what string
		from *netns.Host
		at   netip.Addr
	}{
		{"its second InternalIP", c.Net.Client, h.IPv6},
		{"another of its addresses", h, other},
		{"its loopback", h, netip.MustParseAddr("127.0.0.1")},
		{"its IPv6 loopback", h, netip.IPv6Loopback()},
	} {
		if c.probeAt(t, tc.from, h.Label, netip.AddrPortFrom(tc.at, 7474)) {
			t.Errorf("a probe to %s (%s of %s) was answered", tc.at, tc.what, h.Label)
		}
		if code, err := get(tc.from, tc.at, "/metrics"); err == nil {
			t.Errorf("/metrics served at %s (%s of %s): %d", tc.at, tc.what, h.Label, code)
		}
	}
	if code, err := get(c.Net.Client, h.IPv4, "/metrics"); err != nil || code != http.StatusOK {
		t.Errorf("/metrics at %s, the first InternalIP of %s: %d, %v", h.IPv4, h.Label, code, err)
	}

	// And the ccm still sees the node up, probing it at its InternalIP all along.
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Agent(h.Label); got != "up" {
		t.Errorf("agent of %s is %q, want up", h.Label, got)
	}
}
