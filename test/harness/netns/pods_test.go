package netns_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// addPod adds a pod to node and fails the test if that fails.
func addPod(t *testing.T, n *netns.Network, node *netns.Host, name string) *netns.Host {
	t.Helper()
	pod, err := n.AddPod(node, name)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// sysctl reads a setting of h's namespace.
func sysctl(t *testing.T, h *netns.Host, path string) string {
	t.Helper()
	out, err := h.Run(t.Context(), "cat", "/proc/sys/"+path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// addrs returns the addresses of h's interface ifname as address/length, failing the
// test if one is tentative.
func addrs(t *testing.T, h *netns.Host, ifname string) []string {
	t.Helper()
	out, err := h.Run(t.Context(), "ip", "-json", "addr", "show", "dev", ifname)
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
		t.Fatalf("%s: parse %q: %v", h.Label, out, err)
	}
	var got []string
	for _, a := range links[0].AddrInfo {
		if a.Tentative {
			t.Errorf("%s: %s on %s is tentative", h.Label, a.Local, ifname)
		}
		got = append(got, fmt.Sprintf("%s/%d", a.Local, a.Prefixlen))
	}
	return append(got, "mac "+links[0].Address)
}

// routeVia returns the gateway of h's route to dst, and the device, as ip route get
// shows them.
func routeVia(t *testing.T, h *netns.Host, dst netip.Addr) (gateway, dev string) {
	t.Helper()
	out, err := h.Run(t.Context(), "ip", "-json", "route", "get", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	var routes []struct {
		Gateway string `json:"gateway"`
		Dev     string `json:"dev"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil || len(routes) != 1 {
		t.Fatalf("%s: parse %q: %v", h.Label, out, err)
	}
	return routes[0].Gateway, routes[0].Dev
}

// TestPodTopology checks the pod ranges, the nodes' pod bridges and routes, and the
// addresses, MACs and routes of pods as AddPod hands them out.
func TestPodTopology(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	node1, node2 := n.Nodes[0], n.Nodes[1]
	if n.PodSubnet4.String() != "198.19.0.0/16" || n.PodSubnet6.String() != "fd00:198:19::/48" {
		t.Errorf("network's pod subnets %s %s, want 198.19.0.0/16 fd00:198:19::/48", n.PodSubnet4, n.PodSubnet6)
	}
	for _, w := range []struct {
		h                *netns.Host
		pods4, pods6, gw string
	}{
		{node1, "198.19.1.0/24", "fd00:198:19:1::/64", "02:00:01:00:01:01"},
		{node2, "198.19.2.0/24", "fd00:198:19:2::/64", "02:00:01:00:02:01"},
	} {
		h := w.h
		if h.PodSubnet4.String() != w.pods4 || h.PodSubnet6.String() != w.pods6 {
			t.Errorf("%s: pod ranges %s %s, want %s %s", h.Label, h.PodSubnet4, h.PodSubnet6, w.pods4, w.pods6)
		}
		got := addrs(t, h, netns.PodBridge)
		for _, want := range []string{h.PodSubnet4.Addr().Next().String() + "/24", h.PodSubnet6.Addr().Next().String() + "/64", "mac " + w.gw} {
			if !slices.Contains(got, want) {
				t.Errorf("%s: %s has %v, want %s among them", h.Label, netns.PodBridge, got, want)
			}
		}
	}
	// Each node routes the other's pod range to the other's eth0 address.
	for _, tt := range []struct {
		from, to *netns.Host
		dst      netip.Addr
	}{
		{node1, node2, node2.PodSubnet4.Addr().Next().Next()},
		{node1, node2, node2.PodSubnet6.Addr().Next().Next()},
		{node2, node1, node1.PodSubnet4.Addr().Next().Next()},
		{node2, node1, node1.PodSubnet6.Addr().Next().Next()},
	} {
		gw, dev := routeVia(t, tt.from, tt.dst)
		want := tt.to.IPv4
		if tt.dst.Is6() {
			want = tt.to.IPv6
		}
		if gw != want.String() || dev != "eth0" {
			t.Errorf("%s routes %s via %s dev %s, want via %s dev eth0", tt.from.Label, tt.dst, gw, dev, want)
		}
	}
	// Neither the client nor the bridge's namespace has a route to pods.
	for _, h := range []*netns.Host{n.Client, n.Bridge} {
		for _, dst := range []string{"198.19.1.2", "fd00:198:19:1::2"} {
			if out, err := h.Run(t.Context(), "ip", "route", "get", dst); err == nil {
				t.Errorf("%s has a route to a pod: %s", h.Label, out)
			}
		}
	}

	web0 := addPod(t, n, node1, "web-0")
	web1 := addPod(t, n, node1, "web-1")
	db0 := addPod(t, n, node2, "db-0")
	for _, w := range []struct {
		pod                  *netns.Host
		label, suffix, mac   string
		ipv4, ipv6, gw4, gw6 string
		node                 *netns.Host
	}{
		{web0, "web-0", "-node1-pod2", "02:00:01:00:01:02", "198.19.1.2", "fd00:198:19:1::2", "198.19.1.1", "fd00:198:19:1::1", node1},
		{web1, "web-1", "-node1-pod3", "02:00:01:00:01:03", "198.19.1.3", "fd00:198:19:1::3", "198.19.1.1", "fd00:198:19:1::1", node1},
		{db0, "db-0", "-node2-pod2", "02:00:01:00:02:02", "198.19.2.2", "fd00:198:19:2::2", "198.19.2.1", "fd00:198:19:2::1", node2},
	} {
		p := w.pod
		if !strings.HasPrefix(p.Name, "bmt-") || !strings.HasSuffix(p.Name, w.suffix) {
			t.Errorf("%s: Name = %q, want bmt-<pid>-<n>%s", w.label, p.Name, w.suffix)
		}
		if p.Label != w.label || p.Interface != "eth0" || p.MAC.String() != w.mac || p.IPv4.String() != w.ipv4 ||
			p.IPv6.String() != w.ipv6 || p.Node != w.node || p.PodSubnet4.IsValid() {
			t.Errorf("%s: got %s %s %s %s %s node %v pods %v, want %s eth0 %s %s %s node %s no pods", w.label,
				p.Label, p.Interface, p.MAC, p.IPv4, p.IPv6, p.Node, p.PodSubnet4, w.label, w.mac, w.ipv4, w.ipv6, w.node.Label)
		}
		if !p.LinkLocal.IsLinkLocalUnicast() {
			t.Errorf("%s: LinkLocal = %v, want a link-local address", w.label, p.LinkLocal)
		}
		got := addrs(t, p, "eth0")
		for _, want := range []string{w.ipv4 + "/24", w.ipv6 + "/64", p.LinkLocal.String() + "/64", "mac " + w.mac} {
			if !slices.Contains(got, want) {
				t.Errorf("%s: eth0 has %v, want %s among them", w.label, got, want)
			}
		}
		for _, tt := range []struct{ dst, gw string }{{"198.18.0.200", w.gw4}, {"fd00:198:18::c8", w.gw6}} {
			if gw, dev := routeVia(t, p, netip.MustParseAddr(tt.dst)); gw != tt.gw || dev != "eth0" {
				t.Errorf("%s routes %s via %s dev %s, want via %s dev eth0", w.label, tt.dst, gw, dev, tt.gw)
			}
		}
	}
	if got := n.Pods(); !slices.Equal(got, []*netns.Host{web0, web1, db0}) {
		t.Errorf("Pods() = %v, want web-0, web-1, db-0", got)
	}

	// The nodes forward, for their pods, and keep their ARP behaviour.
	for _, h := range n.Nodes {
		for path, want := range map[string]string{
			"net/ipv4/ip_forward":                "1",
			"net/ipv4/conf/eth0/forwarding":      "1",
			"net/ipv6/conf/all/forwarding":       "1",
			"net/ipv6/conf/eth0/forwarding":      "1",
			"net/ipv6/conf/cbr0/forwarding":      "1",
			"net/ipv4/conf/all/arp_ignore":       "1",
			"net/ipv4/conf/default/arp_ignore":   "1",
			"net/ipv4/conf/eth0/arp_ignore":      "1",
			"net/ipv4/conf/all/arp_announce":     "2",
			"net/ipv4/conf/default/arp_announce": "2",
			"net/ipv4/conf/eth0/arp_announce":    "2",
		} {
			if got := sysctl(t, h, path); got != want {
				t.Errorf("%s: %s = %s, want %s", h.Label, path, got, want)
			}
		}
	}
}

// TestPodTraffic checks that pods reach their node, pods on the same and on the other
// node, and the other node; that nodes reach their own and the other node's pods; and
// that a pod's server sees the address each of them sent from, untranslated.
func TestPodTraffic(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 2)
	node1, node2 := n.Nodes[0], n.Nodes[1]
	web0 := addPod(t, n, node1, "web-0")
	web1 := addPod(t, n, node1, "web-1")
	db0 := addPod(t, n, node2, "db-0")

	for _, tt := range []struct{ from, to *netns.Host }{
		{node1, web0}, {web0, node1}, // a pod and its node
		{web0, web1}, {web1, web0}, // on one node's bridge
		{web0, db0}, {db0, web0}, // across nodes
		{node2, web0}, {web0, node2}, // a node and the other node's pod
	} {
		for _, dst := range []netip.Addr{tt.to.IPv4, tt.to.IPv6} {
			if err := tt.from.Ping(dst, pingTimeout); err != nil {
				t.Errorf("%s → %s: %v", tt.from.Label, tt.to.Label, err)
			}
		}
	}
	// A pod also reaches its gateway, the node's address on its bridge.
	for _, gw := range []netip.Addr{node1.PodSubnet4.Addr().Next(), node1.PodSubnet6.Addr().Next()} {
		if err := web0.Ping(gw, pingTimeout); err != nil {
			t.Errorf("web-0 → its gateway: %v", err)
		}
	}

	// web-0's server, on both families.
	const port = 8080
	for _, network := range []string{"tcp4", "tcp6"} {
		l, err := web0.Listen(network, fmt.Sprintf(":%d", port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go traffic.ServePod(l, web0.Label, node1.Label)
	}
	for _, tt := range []struct {
		from       *netns.Host
		src4, src6 string // what web-0 sees
	}{
		{node1, "198.19.1.1", "fd00:198:19:1::1"}, // the node's address on the bridge
		{web1, "198.19.1.3", "fd00:198:19:1::3"},
		{db0, "198.19.2.2", "fd00:198:19:2::2"},
		{node2, "198.18.0.2", "fd00:198:18::2"}, // the other node's eth0 address
	} {
		for _, c := range []struct{ dst, src string }{{web0.IPv4.String(), tt.src4}, {web0.IPv6.String(), tt.src6}} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			got, err := traffic.Ask(ctx, tt.from.Dial, netip.AddrPortFrom(netip.MustParseAddr(c.dst), port))
			cancel()
			want := traffic.Answer{Pod: "web-0", Node: "node1", Client: netip.MustParseAddr(c.src)}
			if err != nil || got != want {
				t.Errorf("%s → web-0 at %s: %+v, %v; want %+v", tt.from.Label, c.dst, got, err, want)
			}
		}
	}
}

// TestRemovePod checks that RemovePod takes a pod off its node at once, processes,
// sockets and all, and frees its addresses for the next pod.
func TestRemovePod(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1 := n.Nodes[0]
	old := addPod(t, n, node1, "old")
	keep := addPod(t, n, node1, "keep")

	// A listener inside keeps what is left of the namespace alive after RemovePod, and
	// a process inside is killed.
	l, err := old.Listen("tcp4", ":8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go traffic.ServePod(l, old.Label, node1.Label)
	p, err := process.StartCmd("sleep", old.Command(context.Background(), "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
	})
	waitPids(t, old.Name)

	if err := n.RemovePod(old); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(namespaces(t), old.Name) {
		t.Errorf("namespace %s is left after RemovePod", old.Name)
	}
	if out, err := node1.Run(t.Context(), "ip", "link", "show", "veth2"); err == nil {
		t.Errorf("node1's port of the removed pod is left: %s", out)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Error("the process inside the pod survived RemovePod")
	}
	if err := node1.Ping(old.IPv4, pingTimeout); err == nil {
		t.Errorf("node1 reaches the removed pod's %s", old.IPv4)
	}
	if got := n.Pods(); !slices.Equal(got, []*netns.Host{keep}) {
		t.Errorf("Pods() = %v after RemovePod, want only keep", got)
	}
	if err := n.RemovePod(old); err != nil {
		t.Errorf("RemovePod again: %v", err)
	}

	// The next pod gets the lowest free number: the removed pod's addresses and MAC.
	reused := addPod(t, n, node1, "new")
	if reused.IPv4 != old.IPv4 || reused.IPv6 != old.IPv6 || reused.MAC.String() != old.MAC.String() || reused.Name != old.Name {
		t.Errorf("next pod: %s %s %s %s, want the removed pod's %s %s %s %s",
			reused.Name, reused.IPv4, reused.IPv6, reused.MAC, old.Name, old.IPv4, old.IPv6, old.MAC)
	}
	for _, dst := range []netip.Addr{reused.IPv4, reused.IPv6} {
		if err := keep.Ping(dst, pingTimeout); err != nil {
			t.Errorf("keep → new: %v", err)
		}
	}
	// Not the old pod's listener, which is still open.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if a, err := traffic.Ask(ctx, node1.Dial, netip.AddrPortFrom(reused.IPv4, 8080)); err == nil {
		t.Errorf("the removed pod's server answered at %s: %+v", reused.IPv4, a)
	}
}

// waitPids waits until a process is inside the namespace called name.
func waitPids(t *testing.T, name string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		out, _ := exec.CommandContext(t.Context(), "ip", "netns", "pids", name).Output()
		if strings.TrimSpace(string(out)) != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process showed up in %s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAddPodErrors checks what AddPod refuses.
func TestAddPodErrors(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	for _, tt := range []struct {
		what string
		node *netns.Host
		name string
	}{
		{"the client", n.Client, "x"},
		{"the bridge", n.Bridge, "x"},
		{"no host", nil, "x"},
		{"no name", n.Nodes[0], ""},
	} {
		if pod, err := n.AddPod(tt.node, tt.name); err == nil {
			t.Errorf("AddPod on %s: got %s, want an error", tt.what, pod.Name)
		}
	}
	pod := addPod(t, n, n.Nodes[0], "x")
	if _, err := n.AddPod(pod, "y"); err == nil {
		t.Error("AddPod on a pod succeeded")
	}
	if got := n.Pods(); len(got) != 1 {
		t.Errorf("Pods() = %v, want only x", got)
	}
}

// TestPodsClose checks that Close removes the pods, also ones added concurrently.
func TestPodsClose(t *testing.T) {
	netns.RequireRoot(t)
	n, err := netns.Create(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if _, err := n.AddPod(n.Nodes[i%2], fmt.Sprintf("pod-%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	pods := n.Pods()
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if len(names) != 4 || !containsAll(namespaces(t), names) || names[0] == names[1] {
		t.Fatalf("pods %v, want 4 namespaces, two per node", names)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces(t) {
		if slices.Contains(names, ns) {
			t.Errorf("namespace %s is left after Close", ns)
		}
	}
	if err := n.RemovePod(pods[0]); err != nil {
		t.Errorf("RemovePod after Close: %v", err)
	}
	if _, err := n.AddPod(n.Nodes[0], "late"); err == nil {
		t.Error("AddPod after Close succeeded")
	}
}
