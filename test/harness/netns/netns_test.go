package netns_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// pingTimeout is what `ping -W1` waits: on a bridge a reply takes well under a
// millisecond, so a second means none is coming.
const pingTimeout = time.Second

func TestTopology(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	ctx := t.Context()

	want := []struct {
		h          *netns.Host
		label      string
		ifname     string
		mac        string
		ipv4, ipv6 string
		arpIgnore  string
	}{
		{n.Nodes[0], "node1", "eth0", "02:00:00:00:00:01", "198.18.0.1", "fd00:198:18::1", "1"},
		{n.Nodes[1], "node2", "eth0", "02:00:00:00:00:02", "198.18.0.2", "fd00:198:18::2", "1"},
		{n.Client, "client", "eth0", "02:00:00:00:00:c8", "198.18.0.200", "fd00:198:18::c8", "0"},
		{n.Bridge, "bridge", "br0", "02:00:00:00:00:fe", "198.18.0.254", "fd00:198:18::fe", "0"},
	}
	for _, w := range want {
		h := w.h
		if !strings.HasPrefix(h.Name, "bmt-") || !strings.HasSuffix(h.Name, "-"+w.label) {
			t.Errorf("%s: Name = %q, want bmt-<pid>-<n>-%s", w.label, h.Name, w.label)
		}
		if h.Label != w.label || h.Interface != w.ifname || h.MAC.String() != w.mac ||
			h.IPv4.String() != w.ipv4 || h.IPv6.String() != w.ipv6 {
			t.Errorf("%s: got %s %s %s %s %s, want %s %s %s %s %s", w.label,
				h.Label, h.Interface, h.MAC, h.IPv4, h.IPv6, w.label, w.ifname, w.mac, w.ipv4, w.ipv6)
		}
		if !h.LinkLocal.IsLinkLocalUnicast() {
			t.Errorf("%s: LinkLocal = %v, want a link-local address", w.label, h.LinkLocal)
		}

		// What the kernel has, as ip(8) shows it.
		out, err := h.Run(ctx, "ip", "-json", "addr", "show", "dev", h.Interface)
		if err != nil {
			t.Fatal(err)
		}
		var links []struct {
			Address  string `json:"address"`
			AddrInfo []struct {
				Local     string `json:"local"`
				Prefixlen int    `json:"prefixlen"`
				Tentative bool   `json:"tentative"`
			} `json:"addr_info"`
		}
		if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
			t.Fatalf("%s: parse %q: %v", w.label, out, err)
		}
		var addrs []string
		for _, a := range links[0].AddrInfo {
			if a.Tentative {
				t.Errorf("%s: %s is tentative", w.label, a.Local)
			}
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.Prefixlen))
		}
		for _, a := range []string{w.ipv4 + "/24", w.ipv6 + "/64", h.LinkLocal.String() + "/64"} {
			if !slices.Contains(addrs, a) {
				t.Errorf("%s: %s has %v, want %s among them", w.label, h.Interface, addrs, a)
			}
		}
		if links[0].Address != w.mac {
			t.Errorf("%s: %s has MAC %s, want %s", w.label, h.Interface, links[0].Address, w.mac)
		}

		for _, conf := range []string{"all", "default", h.Interface} {
			path := "/proc/sys/net/ipv4/conf/" + conf + "/arp_ignore"
			out, err := h.Run(ctx, "cat", path)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != w.arpIgnore {
				t.Errorf("%s: %s = %s, want %s", w.label, path, got, w.arpIgnore)
			}
		}
	}
	for _, h := range n.Nodes {
		out, err := h.Run(ctx, "cat", "/proc/sys/net/ipv4/conf/eth0/arp_announce")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "2" {
			t.Errorf("%s: eth0 arp_announce = %s, want 2", h.Label, got)
		}
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	node1, node2 := n.Nodes[0], n.Nodes[1]
	for _, tt := range []struct{ from, to *netns.Host }{
		{n.Client, node1},
		{node1, node2},
		{node2, n.Bridge},
	} {
		for _, dst := range []netip.Addr{tt.to.IPv4, tt.to.IPv6} {
			if err := tt.from.Ping(dst, pingTimeout); err != nil {
				t.Errorf("%s → %s: %v", tt.from.Label, tt.to.Label, err)
			}
		}
	}

	// The same with ping(8), where it is installed: the package does not need it.
	if _, err := exec.LookPath("ping"); err != nil {
		t.Logf("no ping program (%v): only Host.Ping tested", err)
		return
	}
	for _, dst := range []netip.Addr{node1.IPv4, node1.IPv6} {
		if _, err := n.Client.Run(t.Context(), "ping", "-c1", "-W1", dst.String()); err != nil {
			t.Error(err)
		}
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)

	// An echo server on the root namespace's loopback, which the nodes cannot reach.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, echo)

	addr, err := n.Forward(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if addr.Addr() != n.Bridge.IPv4 || addr.Port() == 0 {
		t.Errorf("Forward returned %s, want %s:<port>", addr, n.Bridge.IPv4)
	}
	for i := range 3 {
		c, err := n.Nodes[0].Dial(t.Context(), "tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("hello %d\n", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		// Half-close: the forwarder must pass the end of the stream on, and the echo
		// server's end back.
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != msg {
			t.Fatalf("echo through the forwarder: got %q, %v; want %q", got, err, msg)
		}
	}

	// Close ends the forwarder.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Forward(echo.Addr().String()); err == nil {
		t.Error("Forward on a closed network succeeded")
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1 := n.Nodes[0]

	// Listening on every address: inside node1 that includes 198.18.0.1 and 127.0.0.1,
	// which tells whether it is the root namespace's loopback.
	var ln net.Listener
	err := node1.Do(func() (err error) {
		ln, err = net.Listen("tcp", ":0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, node1.Label+"\n") // what fails, the client sees
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	for _, dst := range []netip.Addr{node1.IPv4, node1.IPv6} {
		c, err := n.Client.Dial(t.Context(), "tcp", netip.AddrPortFrom(dst, port).String())
		if err != nil {
			t.Fatalf("client dials node1's listener: %v", err)
		}
		if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != "node1\n" {
			t.Errorf("client reads from node1's listener at %s: %q, %v", dst, line, err)
		}
	}

	// Not in the root namespace: its loopback has no such listener. (Nothing is sent to
	// node1's addresses from there: the root namespace has no route to them but its
	// default route, out of this machine.)
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String(), time.Second)
	if err == nil {
		if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line == "node1\n" {
			t.Error("node1's listener is reachable from the root namespace")
		}
	}
}

// TestDoThreads checks that Do switches only its own thread and puts it back: many
// concurrent calls see node1's eth0, while the root namespace never does.
func TestDoThreads(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1 := n.Nodes[0]

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			err := node1.Do(func() error {
				ifi, err := net.InterfaceByName("eth0")
				if err != nil {
					return err
				}
				if ifi.HardwareAddr.String() != node1.MAC.String() {
					return fmt.Errorf("eth0 has MAC %s, want %s", ifi.HardwareAddr, node1.MAC)
				}
				return nil
			})
			if err != nil {
				t.Errorf("inside node1: %v", err)
			}
		})
		wg.Go(func() {
			ifs, err := net.Interfaces()
			if err != nil {
				t.Error(err)
				return
			}
			for _, ifi := range ifs {
				if ifi.HardwareAddr.String() == node1.MAC.String() {
					t.Errorf("root namespace sees node1's %s", ifi.Name)
				}
			}
		})
	}
	wg.Wait()

	want := fmt.Errorf("fn failed")
	if err := node1.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v, want fn's error %v", err, want)
	}
}

// TestAddLocal checks that a node's kernel accepts traffic for an address on its lo but
// does not answer ARP for it on eth0, so that only the agent makes the address
// reachable; IPv6 neighbour discovery behaves the same without any setting.
func TestAddLocal(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1, client := n.Nodes[0], n.Client
	for _, svc := range []netip.Addr{netip.MustParseAddr("198.18.0.77"), netip.MustParseAddr("fd00:198:18::77")} {
		t.Run(svc.String(), func(t *testing.T) {
			if err := node1.AddLocal(svc); err != nil {
				t.Fatal(err)
			}
			if err := client.Ping(svc, pingTimeout); err == nil {
				t.Fatalf("client reaches %s on node1's lo without a neighbour entry: the kernel answered for it", svc)
			}
			mac, state, err := client.Neighbor(svc)
			if err != nil {
				t.Fatal(err)
			}
			if mac != nil {
				t.Errorf("client's neighbour entry for %s: %s %s, want no MAC", svc, mac, state)
			}

			// A static entry stands in for the agent's answer.
			_, err = client.Run(t.Context(), "ip", "neigh", "replace", svc.String(),
				"lladdr", node1.MAC.String(), "nud", "permanent", "dev", client.Interface)
			if err != nil {
				t.Fatal(err)
			}
			if err := client.Ping(svc, pingTimeout); err != nil {
				t.Fatalf("with a static neighbour entry: %v", err)
			}
			mac, state, err = client.Neighbor(svc)
			if err != nil {
				t.Fatal(err)
			}
			if mac.String() != node1.MAC.String() || state != "PERMANENT" {
				t.Errorf("client's neighbour entry for %s: %s %s, want %s PERMANENT", svc, mac, state, node1.MAC)
			}

			if err := client.FlushNeighbors(); err != nil {
				t.Fatal(err)
			}
			if mac, state, err := client.Neighbor(svc); err != nil || mac != nil || state != "" {
				t.Errorf("after FlushNeighbors: %s %q %v, want no entry", mac, state, err)
			}
			if err := node1.DelLocal(svc); err != nil {
				t.Fatal(err)
			}
			if err := node1.DelLocal(svc); err == nil {
				t.Error("DelLocal of an address that is gone succeeded")
			}
		})
	}
}

func TestSetLink(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1 := n.Nodes[0]
	for _, dst := range []netip.Addr{node1.IPv4, node1.IPv6} {
		if err := n.Client.Ping(dst, pingTimeout); err != nil {
			t.Fatal(err)
		}
	}
	if err := node1.SetLink(false); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Addr{node1.IPv4, node1.IPv6} {
		if err := n.Client.Ping(dst, pingTimeout); err == nil {
			t.Errorf("client reaches %s while node1's link is down", dst)
		}
	}
	if err := node1.SetLink(true); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Addr{node1.IPv4, node1.IPv6} {
		if err := n.Client.Ping(dst, pingTimeout); err != nil {
			t.Errorf("after the link is up again: %v", err)
		}
	}
}

func TestClose(t *testing.T) {
	netns.RequireRoot(t)
	start := time.Now()
	n, err := netns.Create(2)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	t.Cleanup(func() { n.Close() })
	names := []string{n.Bridge.Name, n.Client.Name, n.Nodes[0].Name, n.Nodes[1].Name}
	if got := namespaces(t); !containsAll(got, names) {
		t.Fatalf("ip netns list shows %v, want %v among them", got, names)
	}

	// A process inside, as a test's agent would be: Close kills it.
	p, err := process.StartCmd("sleep", n.Nodes[0].Command(context.Background(), "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
	})

	start = time.Now()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Create(2) took %s, Close %s", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Error("the process inside node1 survived Close")
	}
	for _, ns := range namespaces(t) {
		if slices.Contains(names, ns) {
			t.Errorf("namespace %s is left after Close", ns)
		}
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSweep(t *testing.T) {
	netns.RequireRoot(t)
	ctx := t.Context()

	// A pid that was alive a moment ago and is not any more.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("bmt-%d-1-sweeptest", dead.Process.Pid)
	live := fmt.Sprintf("bmt-%d-0-sweeptest", os.Getpid())
	for _, ns := range []string{stale, live} {
		if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		// Sweep deletes the stale one first, and the deletion then fails.
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	}
	sleeper, err := process.StartCmd("sleep", exec.Command("ip", "netns", "exec", stale, "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sleeper.Kill(); err != nil {
			t.Error(err)
		}
	})
	// Wait until the child has entered the namespace, for Sweep to find it there.
	for deadline := time.Now().Add(5 * time.Second); ; {
		out, _ := exec.Command("ip", "netns", "pids", stale).Output()
		if strings.TrimSpace(string(out)) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep never showed up in the stale namespace")
		}
		time.Sleep(5 * time.Millisecond)
	}

	if err := netns.Sweep(); err != nil {
		t.Fatal(err)
	}
	got := namespaces(t)
	if slices.Contains(got, stale) {
		t.Errorf("Sweep left %s, whose creator is dead", stale)
	}
	if !slices.Contains(got, live) {
		t.Errorf("Sweep removed %s, whose creator (this test) is alive", live)
	}
	select {
	case <-sleeper.Exited():
	case <-time.After(5 * time.Second):
		t.Error("Sweep left the process inside the stale namespace alive")
	}
}

// namespaces returns the names that ip netns list shows.
func namespaces(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// Lines look like "name (id: 3)".
		if name, _, _ := strings.Cut(line, " "); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func TestEnableForwarding(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	ctx := t.Context()
	node := n.Nodes[0]
	if err := node.EnableForwarding(); err != nil {
		t.Fatal(err)
	}
	sysctl := func(h *netns.Host, path string) string {
		t.Helper()
		out, err := h.Run(ctx, "cat", "/proc/sys/"+path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	for path, want := range map[string]string{
		"net/ipv4/ip_forward":                "1",
		"net/ipv4/conf/eth0/forwarding":      "1",
		"net/ipv6/conf/all/forwarding":       "1",
		"net/ipv6/conf/eth0/forwarding":      "1",
		"net/ipv4/conf/all/arp_ignore":       "1",
		"net/ipv4/conf/eth0/arp_ignore":      "1",
		"net/ipv4/conf/all/arp_announce":     "2",
		"net/ipv4/conf/eth0/arp_announce":    "2",
		"net/ipv4/conf/default/arp_ignore":   "1",
		"net/ipv4/conf/default/arp_announce": "2",
	} {
		if got := sysctl(node, path); got != want {
			t.Errorf("%s: %s = %s, want %s", node.Label, path, got, want)
		}
	}
	// The other node keeps what a new namespace has: no IPv6 forwarding. (IPv4 forwarding
	// is copied from the machine's.)
	if got := sysctl(n.Nodes[1], "net/ipv6/conf/all/forwarding"); got != "0" {
		t.Errorf("%s: net/ipv6/conf/all/forwarding = %s, want 0", n.Nodes[1].Label, got)
	}
}

// serveEcho echoes what every connection to ln sends until the test ends, and then
// closes ln.
func serveEcho(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c) // what fails, the client sees
			}()
		}
	}()
}
