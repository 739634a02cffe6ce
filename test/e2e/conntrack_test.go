package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// TestConnectionBeforeRules: a client's SYN that reaches a new Service's announcer before
// the node's kube-proxy has the Service's rules is tracked by the node's kernel
// untranslated, and so is every retransmission of it after the rules are in: the agent
// clears that entry, so the connection's retries get through once kube-proxy has caught
// up. Without the sweep they keep failing while the rules are in place: the case without
// it shows the entry is what stops them. kube-proxy is held back here by stopping it
// (SIGSTOP) while the Service is created; a busy or slow kube-proxy leaves the same gap.
func TestConnectionBeforeRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sweep bool
	}{
		{"sweep", true},
		{"no sweep", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			if !tc.sweep {
				for _, h := range c.Net.Nodes {
					if err := c.Agent(h.Label).Stop(5 * time.Second); err != nil {
						t.Fatal(err)
					}
					if _, err := c.StartAgentArgs(h, "--sweep-conntrack=false"); err != nil {
						t.Fatal(err)
					}
				}
			}
			c.startCCM(t)
			c.waitSettled(t)
			resume := c.stopKubeProxies(t)
			svc, addrs := c.createLBService(t, "early")
			node := c.Node(c.announcer(t, svc))

			// Each family's connection, from a port of its own, is tried until its SYN
			// reaches the announcer and stays there untranslated.
			ports := map[netip.Addr]int{}
			for i, addr := range addrs {
				ports[addr] = 40100 + i
				c.waitUntranslated(t, node, addr, ports[addr])
			}
			synced := resume()
			t.Logf("kube-proxy wrote the Service's rules %v after it resumed", time.Since(synced).Round(time.Millisecond))

			// Without the sweep, retries that fail for a few times as long as they take
			// to get through with it show the entry stops them.
			within := 20 * time.Second
			if !tc.sweep {
				within = 5 * time.Second
			}
			for _, addr := range addrs {
				connected, err := c.retryFrom(addr, ports[addr], within)
				switch {
				case tc.sweep && err != nil:
					t.Errorf("%s: %v", addr, err)
				case tc.sweep:
					t.Logf("%s: connected from port %d %v after kube-proxy's rules", addr, ports[addr], connected.Sub(synced).Round(time.Millisecond))
				case err != nil:
					t.Logf("%s: without the sweep, %v", addr, err)
				default:
					t.Errorf("%s: without the sweep, connected from port %d %v after kube-proxy's rules; want the entry to keep the retries failing", addr, ports[addr], connected.Sub(synced).Round(time.Millisecond))
				}
			}
			if tc.sweep {
				if got := c.metric(t, node, "baremetal_agent_conntrack_entries_cleared_total"); got == "" || got == "0" {
					t.Errorf("%s's agent cleared %q entries, want some", node.Label, got)
				}
			}
		})
	}
}

// stopKubeProxies stops every node's kube-proxy (SIGSTOP) and returns the function that
// resumes them and waits until each has written its rules since, returning when the last
// did. The test's end resumes them too.
func (c *cluster) stopKubeProxies(t testing.TB) (resume func() time.Time) {
	t.Helper()
	signal := func(sig syscall.Signal) error {
		for _, h := range c.Net.Nodes {
			if err := syscall.Kill(c.KubeProxy(h.Label).Pid(), sig); err != nil {
				return fmt.Errorf("kube-proxy on %s: %v: %w", h.Label, sig, err)
			}
		}
		return nil
	}
	t.Cleanup(func() { _ = signal(syscall.SIGCONT) })
	if err := signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return func() time.Time {
		t.Helper()
		resumed := time.Now()
		if err := signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		var last time.Time
		for _, h := range c.Net.Nodes {
			last = c.waitKubeProxySynced(t, h, resumed)
		}
		return last
	}
}

// waitKubeProxySynced waits up to 10 s until h's kube-proxy has written the rules of both
// families after since, and returns when the later one was.
func (c *cluster) waitKubeProxySynced(t testing.TB, h *netns.Host, since time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		times, err := c.KubeProxy(h.Label).SyncTimes(context.Background())
		if err == nil && times["IPv4"].After(since) && times["IPv6"].After(since) {
			return later(times["IPv4"], times["IPv6"])
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy on %s has not written its rules since %s: %v %v", h.Label, since.Format("15:04:05.000"), times, err)
		}
		time.Sleep(50 * time.Millisecond) // polls kube-proxy's metrics
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitUntranslated connects from the client's port to addr until node's kernel tracks
// that connection untranslated, which it does once the node answers for addr, and fails
// the test if that takes over 10 s.
func (c *cluster) waitUntranslated(t testing.TB, node *netns.Host, addr netip.Addr, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.dialFrom(addr, port); err == nil {
			t.Fatalf("connected to %s from port %d with kube-proxy stopped: the test's premise, no rules for the Service on %s, does not hold", addr, port, node.Label)
		}
		if untranslated(t, node, addr, port) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no untranslated entry of the client's port %d to %s on %s after 10 s", port, addr, node.Label)
		}
	}
}

// untranslated reports whether node's kernel tracks the client's connection from port to
// addr with no translation: its reply would come from addr itself.
func untranslated(t testing.TB, node *netns.Host, addr netip.Addr, port int) bool {
	t.Helper()
	family := netlink.InetFamily(unix.AF_INET)
	if addr.Is6() {
		family = unix.AF_INET6
	}
	var flows []*netlink.ConntrackFlow
	if err := node.Do(func() (err error) {
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, family)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
		replySrc, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
		if int(f.Forward.SrcPort) == port && dst.Unmap() == addr && replySrc.Unmap() == addr {
			return true
		}
	}
	return false
}

// retryFrom connects from the client's port to addr, as retransmissions of one SYN do,
// until it connects or within is over; it returns when it connected.
func (c *cluster) retryFrom(addr netip.Addr, port int, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = c.dialFrom(addr, port); err == nil {
			return time.Now(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not connected from port %d in %v: %w", port, within, err)
}

// dialFrom connects from the client's port to addr's Service port, giving up after
// 250 ms, and closes the connection.
func (c *cluster) dialFrom(addr netip.Addr, port int) error {
	local := c.Net.Client.IPv4
	if addr.Is6() {
		local = c.Net.Client.IPv6
	}
	return c.Net.Client.Do(func() error {
		d := net.Dialer{
			LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, uint16(port))),
			Timeout:   250 * time.Millisecond,
			// The port of a failed attempt is free at once; of a closed connection, in
			// TIME_WAIT, only with this.
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				}); err != nil {
					return err
				}
				return serr
			},
		}
		conn, err := d.Dial("tcp", netip.AddrPortFrom(addr, servicePort).String())
		if err != nil {
			return err
		}
		return conn.Close()
	})
}
