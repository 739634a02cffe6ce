package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// nft runs nft(8) commands in h's namespace, one per line; the table they add is removed
// with the namespace, and by drop.
func nft(t testing.TB, h *netns.Host, lines ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range lines {
		if out, err := h.Run(ctx, "nft", strings.Fields(l)...); err != nil {
			t.Fatalf("nft %s in %s: %v: %s", l, h.Label, err, out)
		}
	}
}

// drop drops what h sends that matches out and what it receives that matches in (nft
// syntax, such as "udp dport 7474"; empty for nothing), until the returned function is
// called.
func drop(t testing.TB, h *netns.Host, out, in string) (heal func()) {
	t.Helper()
	nft(t, h,
		"add table inet e2e-cut",
		"add chain inet e2e-cut out { type filter hook output priority 0 ; }",
		"add chain inet e2e-cut in { type filter hook input priority 0 ; }",
	)
	if out != "" {
		nft(t, h, "add rule inet e2e-cut out "+out+" drop")
	}
	if in != "" {
		nft(t, h, "add rule inet e2e-cut in "+in+" drop")
	}
	var once sync.Once
	return func() { once.Do(func() { nft(t, h, "delete table inet e2e-cut") }) }
}

// cutFromAPIServer drops the packets between node h and the API server, both ways, so
// that its agent's watch hangs rather than fails (a stream whose acknowledgements are
// lost still delivers what its window lets through), until the returned function is
// called.
func (c *cluster) cutFromAPIServer(t testing.TB, h *netns.Host) (heal func()) {
	t.Helper()
	api := c.API()
	return drop(t, h, fmt.Sprintf("ip daddr %s tcp dport %d", api.Addr(), api.Port()), fmt.Sprintf("ip saddr %s tcp sport %d", api.Addr(), api.Port()))
}

// owned returns how many addresses node h's agent answers for, both families.
func (c *cluster) owned(t testing.TB, h *netns.Host) int {
	t.Helper()
	return int(c.metricValue(t, h, `baremetal_agent_owned_addresses{family="IPv4"}`) +
		c.metricValue(t, h, `baremetal_agent_owned_addresses{family="IPv6"}`))
}

// waitAnswering polls every 10 ms until node h's agent answers for n addresses, and returns
// when it first saw it, or false after within.
func (c *cluster) waitAnswering(t testing.TB, h *netns.Host, n int, within time.Duration) (time.Time, bool) {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, within, true, func(context.Context) (bool, error) {
		at = time.Now()
		return c.owned(t, h) == n, nil
	})
	return at, err == nil
}

// waitAnnouncerSeen polls the Service's announcer annotation every 10 ms until it names
// node, and returns when it first saw it.
func (c *cluster) waitAnnouncerSeen(t testing.TB, svc *corev1.Service, node string, within time.Duration) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, within, true, func(context.Context) (bool, error) {
		at = time.Now()
		return c.announcer(t, svc) == node, nil
	})
	if err != nil {
		t.Fatalf("announcer of %s/%s is %q %v later, want %s", svc.Namespace, svc.Name, c.announcer(t, svc), within, node)
	}
	return at
}

// setPreferredNodes writes the Service's preferred-nodes annotation.
func (c *cluster) setPreferredNodes(t testing.TB, svc *corev1.Service, nodes string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotation.PreferredNodes, nodes)
	if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentCutOffFromAPIServer cuts one agent's connection to the API server (its packets
// dropped, so that its watch hangs rather than fails) and moves its Service to another
// node: the ccm's duty tells it on the probe channel that it no longer holds the
// addresses, and it stops answering for them within a second of the move, while its
// cache still says it announces them.
func TestAgentCutOffFromAPIServer(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a, b := c.Net.Nodes[0], c.Net.Nodes[1]
	svc, addrs := c.createLBService(t, "cut-off", annotation.PreferredNodes, a.Label)
	c.waitSettled(t)
	for _, addr := range addrs {
		c.waitSteady(t, addr, a.Label)
	}
	heal := c.cutFromAPIServer(t, a)
	defer heal()
	// Known state: the agent's view agrees with the ccm's, so a wrong answer later can
	// only come from the move.
	if got := c.owned(t, a); got != len(addrs) {
		t.Fatalf("%s owns %d addresses before the move, want %d", a.Label, got, len(addrs))
	}
	c.setPreferredNodes(t, svc, b.Label)
	moved := c.waitAnnouncerSeen(t, svc, b.Label, 10*time.Second)
	var stopped time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		stopped = time.Now()
		return c.owned(t, a) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s, cut off from the API server, still answers for %d addresses 5 s after the ccm moved them to %s", a.Label, c.owned(t, a), b.Label)
	}
	took := stopped.Sub(moved)
	t.Logf("%s stopped answering %v after the move was seen", a.Label, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("%s stopped answering %v after the move, want within 1 s", a.Label, took)
	}
	if got := c.metric(t, a, "baremetal_agent_confirmed_only"); got != "1" {
		t.Errorf("baremetal_agent_confirmed_only of %s = %q while its cache is frozen, want 1", a.Label, got)
	}
	for _, addr := range addrs {
		c.waitSteady(t, addr, b.Label)
	}
	// Healed, its watch catches up and it trusts its own view again.
	heal()
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return c.metric(t, a, "baremetal_agent_confirmed_only") == "0", nil
	})
	if err != nil {
		t.Errorf("%s still announces only what the ccm confirms 90 s after its API connection healed", a.Label)
	}
}

// TestAgentCutOffFromAPIServerTakesOver cuts the connection to the API server of an agent
// that only stands by, and moves the Service to its node: its frozen cache still names
// the old announcer, so its own view gives it nothing, but the ccm's duty gives it the
// addresses, and it announces them, as the old announcer, whose cache is fresh, stops.
// Announcing only what its own view and the duty agree on, nobody would answer until
// the cut healed.
func TestAgentCutOffFromAPIServerTakesOver(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a, b := c.Net.Nodes[0], c.Net.Nodes[1]
	svc, addrs := c.createLBService(t, "taken-over", annotation.PreferredNodes, a.Label)
	c.waitSettled(t)
	for _, addr := range addrs {
		c.waitSteady(t, addr, a.Label)
	}
	heal := c.cutFromAPIServer(t, b)
	defer heal()
	c.setPreferredNodes(t, svc, b.Label)
	moved := c.waitAnnouncerSeen(t, svc, b.Label, 10*time.Second)
	took, ok := c.waitAnswering(t, b, len(addrs), 5*time.Second)
	if !ok {
		t.Fatalf("%s, cut off from the API server, answers for %d of its %d addresses 5 s after the ccm gave them to it", b.Label, c.owned(t, b), len(addrs))
	}
	t.Logf("%s answered %v after the move was seen", b.Label, took.Sub(moved).Round(time.Millisecond))
	if got := c.metric(t, b, "baremetal_agent_confirmed_only"); got != "1" {
		t.Errorf("baremetal_agent_confirmed_only of %s = %q while its cache is frozen, want 1", b.Label, got)
	}
	for _, addr := range addrs {
		c.waitSteady(t, addr, b.Label)
	}
}

// TestAgentNamedNowhereTakesOver is TestAgentCutOffFromAPIServerTakesOver with a node that
// the frozen cache's plan names nowhere: of four nodes, a plan names the announcer and two
// standbys. The ccm's duty gives it the addresses when the Service moves to it, and it
// announces them though its cache does not say it may; an agent that took up only the
// addresses its cache's plans name left them unanswered until its watch came back, as
// make bench-failover found with the API server stopped after a node had flapped.
func TestAgentNamedNowhereTakesOver(t *testing.T) {
	c := newCluster(t, 4)
	c.startCCM(t)
	a := c.Net.Nodes[0]
	svc, addrs := c.createLBService(t, "named-nowhere", annotation.PreferredNodes, a.Label)
	c.waitSettled(t)
	for _, addr := range addrs {
		c.waitSteady(t, addr, a.Label)
	}
	plan := c.plan(t, svc)
	var x *netns.Host
	for _, h := range c.Net.Nodes {
		if !slices.Contains(plan, h.Label) {
			x = h
		}
	}
	if x == nil {
		t.Fatalf("the plan %v names all %d nodes", plan, len(c.Net.Nodes))
	}
	heal := c.cutFromAPIServer(t, x)
	defer heal()
	c.setPreferredNodes(t, svc, x.Label)
	moved := c.waitAnnouncerSeen(t, svc, x.Label, 10*time.Second)
	took, ok := c.waitAnswering(t, x, len(addrs), 5*time.Second)
	if !ok {
		t.Fatalf("%s, cut off from the API server with a plan (%v) that names it nowhere, answers for %d of its %d addresses 5 s after the ccm gave them to it", x.Label, plan, c.owned(t, x), len(addrs))
	}
	t.Logf("%s answered %v after the move was seen", x.Label, took.Sub(moved).Round(time.Millisecond))
	for _, addr := range addrs {
		c.waitSteady(t, addr, x.Label)
	}
}

// TestAgentCutOffTakesOverFromTheDead: an agent whose watch hangs holds a plan in which
// another node stands first behind the announcer, while the ccm's plan puts it there. When
// the announcer's link goes down, the ccm's duty gives it the addresses and it announces
// them at once, without waiting out the tolerance for a view that differs from the duty:
// the announcer of its cached plan is down, so no live node holds them by that plan. An
// agent that waited left them unanswered half a second longer, as make bench-failover
// found with the API server stopped just before a node died.
func TestAgentCutOffTakesOverFromTheDead(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a := c.Net.Nodes[0]
	svc, addrs := c.createLBService(t, "from-the-dead", annotation.PreferredNodes, a.Label)
	c.waitSettled(t)
	for _, addr := range addrs {
		c.waitSteady(t, addr, a.Label)
	}
	plan := c.plan(t, svc)
	if len(plan) != 3 || plan[0] != a.Label {
		t.Fatalf("plan %v, want %s and two standbys", plan, a.Label)
	}
	x := c.Node(plan[2])
	heal := c.cutFromAPIServer(t, x)
	defer heal()
	c.setPreferredNodes(t, svc, a.Label+","+x.Label)
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p := c.plan(t, svc)
		return len(p) > 1 && p[1] == x.Label, nil
	})
	if err != nil {
		t.Fatalf("plan %v 10 s after preferring %s then %s, want %s first standby", c.plan(t, svc), a.Label, x.Label, x.Label)
	}
	c.waitSettled(t)
	taken := c.metricValue(t, x, "baremetal_agent_vacant_takeovers_total")
	died := time.Now()
	if err := a.SetLink(false); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.SetLink(true); err != nil {
			t.Error(err)
		}
	}()
	at, ok := c.waitAnswering(t, x, len(addrs), 5*time.Second)
	if !ok {
		t.Fatalf("%s, cut off from the API server, answers for %d of its %d addresses 5 s after %s went down", x.Label, c.owned(t, x), len(addrs), a.Label)
	}
	t.Logf("%s answered %v after %s went down", x.Label, at.Sub(died).Round(time.Millisecond), a.Label)
	if got := c.metricValue(t, x, "baremetal_agent_vacant_takeovers_total") - taken; got < float64(len(addrs)) {
		t.Errorf("%s took %v addresses over at once, want %d: it waited out the tolerance for addresses whose cached announcer is down", x.Label, got, len(addrs))
	}
}

// createFamilyService creates a single-stack LoadBalancer Service of family f that
// prefers node, waits for its address and announcer, and returns them. Annotations, as
// key and value in turn, are added to the Service's.
func (c *cluster) createFamilyService(t testing.TB, name string, f corev1.IPFamily, node string, annotations ...string) (*corev1.Service, netip.Addr) {
	t.Helper()
	ctx := context.Background()
	ns := c.namespace(t)
	c.serve(t, ns, name)
	svc := lbServiceSpec(name, ns, f)
	svc.Annotations[annotation.PreferredNodes] = node
	for i := 0; i+1 < len(annotations); i += 2 {
		svc.Annotations[annotations[i]] = annotations[i+1]
	}
	svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addr netip.Addr
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if svc, err = c.Admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || len(svc.Status.LoadBalancer.Ingress) != 1 {
			return false, nil
		}
		addr = netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
		return svc.Annotations[annotation.Announcer] == node, nil
	})
	if err != nil {
		t.Fatalf("Service %s/%s has no address announced by %s: %v", ns, name, node, svc.Status.LoadBalancer.Ingress)
	}
	return svc, addr
}

// TestIPv6AddressLost removes the IPv6 address of the announcing node's interface: its
// IPv6 Service fails over, with an event saying why, and its IPv4 Service stays.
func TestIPv6AddressLost(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a := c.Net.Nodes[0]
	v4, addr4 := c.createFamilyService(t, "lost-v4", corev1.IPv4Protocol, a.Label)
	v6, addr6 := c.createFamilyService(t, "lost-v6", corev1.IPv6Protocol, a.Label)
	c.waitSettled(t)
	c.waitSteady(t, addr4, a.Label)
	c.waitSteady(t, addr6, a.Label)
	l4 := c.startClient(addr4)
	defer l4.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := netip.PrefixFrom(a.IPv6, c.Net.Subnet6.Bits())
	if out, err := a.Run(ctx, "ip", "-6", "addr", "del", prefix.String(), "dev", a.Interface); err != nil {
		t.Fatalf("remove %s from %s: %v: %s", prefix, a.Label, err, out)
	}
	c.waitEvent(t, v6, "AnnouncerChanged", a.Label+" has no IPv6 address on "+a.Interface)
	to := c.announcer(t, v6)
	if to == a.Label || to == "" {
		t.Fatalf("IPv6 announcer %q after %s lost its IPv6 address", to, a.Label)
	}
	c.waitSteady(t, addr6, to)
	if got := c.announcer(t, v4); got != a.Label {
		t.Errorf("IPv4 announcer %s, want %s kept", got, a.Label)
	}
	reqs := l4.Stop()
	if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return !r.OK() || r.Node != a.Label }); bad >= 0 {
		t.Errorf("IPv4 request at %v failed or reached %q, want %s throughout", reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, a.Label)
	}
}

// TestIPv6LostEverywhere removes the IPv6 address of every node's interface: no node can
// announce the dual-stack Service's IPv6 address, and its IPv4 address keeps answering at
// the node that announced it, with a PartlyAnnounced warning naming the family.
func TestIPv6LostEverywhere(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a := c.Net.Nodes[0]
	svc, addrs := c.createLBService(t, "lost-everywhere", annotation.PreferredNodes, a.Label)
	addr4 := addrs[slices.IndexFunc(addrs, netip.Addr.Is4)]
	c.waitSettled(t)
	c.waitSteady(t, addr4, a.Label)
	l4 := c.startClient(addr4)
	defer l4.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The announcer's last, once the ccm knows the others lost theirs (they are no longer
	// its standbys): while another node still had one, the group would go to it.
	for i, h := range slices.Backward(c.Net.Nodes) {
		prefix := netip.PrefixFrom(h.IPv6, c.Net.Subnet6.Bits())
		if out, err := h.Run(ctx, "ip", "-6", "addr", "del", prefix.String(), "dev", h.Interface); err != nil {
			t.Fatalf("remove %s from %s: %v: %s", prefix, h.Label, err, out)
		}
		if i == 1 {
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				return slices.Equal(c.plan(t, svc), []string{a.Label}), nil
			})
			if err != nil {
				t.Fatalf("plan %v once only %s has an IPv6 address, want %s alone", c.plan(t, svc), a.Label, a.Label)
			}
		}
	}
	c.waitEvent(t, svc, "PartlyAnnounced", "No node can announce the IPv6 addresses of pool e2e")
	if got := c.announcer(t, svc); got != a.Label {
		t.Errorf("announcer %q once no node has an IPv6 address, want %s kept for IPv4", got, a.Label)
	}
	// The address was answered throughout; it still is, a while after the warning.
	c.waitSteady(t, addr4, a.Label)
	reqs := l4.Stop()
	if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return !r.OK() || r.Node != a.Label }); bad >= 0 {
		t.Errorf("IPv4 request at %v failed or reached %q, want %s throughout", reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, a.Label)
	}
}

// lbConfig has, besides cloudConfig's pools, pool lb announced only on the nodes' second
// interface lb0, which addLB0 makes.
const lbConfig = cloudConfig + `- name: lb
  addresses: [198.18.0.160-198.18.0.170]
  autoAssign: false
  interfaces: [lb0]
`

// addLB0 gives every node a second interface, lb0, on the bridge, with an address of
// 198.18.6.0/24: the interface pool lb is announced on, apart from eth0, where the ccm
// probes.
func (c *cluster) addLB0(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, h := range c.Net.Nodes {
		port := h.Label + "-lb"
		for _, cmd := range [][]string{
			{"link", "add", "lb0", "type", "veth", "peer", "name", port, "netns", c.Net.Bridge.Name},
			{"addr", "add", fmt.Sprintf("198.18.6.%d/24", i+1), "dev", "lb0"},
			{"link", "set", "lb0", "up"},
		} {
			if out, err := h.Run(ctx, "ip", cmd...); err != nil {
				t.Fatalf("ip %v in %s: %v: %s", cmd, h.Label, err, out)
			}
		}
		if out, err := c.Net.Bridge.Run(ctx, "ip", "link", "set", port, "master", "br0", "up"); err != nil {
			t.Fatalf("attach %s to the bridge: %v: %s", port, err, out)
		}
	}
}

// TestPoolInterfaceDown takes down the interface of pool lb on the node announcing it,
// which still answers the ccm's probes on eth0: the address fails over, with an event
// saying why.
func TestPoolInterfaceDown(t *testing.T) {
	c := newClusterWith(t, controlplane.Shared(t), 3, lbConfig)
	c.addLB0(t)
	c.startCCM(t)
	a := c.Net.Nodes[0]
	svc, addr := c.createFamilyService(t, "pool-interface", corev1.IPv4Protocol, a.Label, annotation.Pool, "lb")
	other, addrOther := c.createFamilyService(t, "other-pool", corev1.IPv4Protocol, a.Label)
	c.waitSettled(t)
	c.waitSteady(t, addr, a.Label)
	l := c.startClient(addr)
	defer l.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	down := time.Now()
	if out, err := a.Run(ctx, "ip", "link", "set", "lb0", "down"); err != nil {
		t.Fatalf("take lb0 of %s down: %v: %s", a.Label, err, out)
	}
	c.waitEvent(t, svc, "AnnouncerChanged", a.Label+" has no up interface for pool lb")
	to := c.announcer(t, svc)
	if to == a.Label || to == "" {
		t.Fatalf("announcer %q after lb0 of %s went down", to, a.Label)
	}
	waitSwitched(t, l, down, to)
	t.Logf("%s serves %s %v after lb0 of %s went down", to, addr, time.Since(down).Round(time.Millisecond), a.Label)
	// The pool on eth0 is not concerned.
	if got := c.announcer(t, other); got != a.Label {
		t.Errorf("announcer of %s is %s, want %s kept", addrOther, got, a.Label)
	}
	c.waitSteady(t, addrOther, a.Label)
}

// TestPartitionHeals cuts the announcing node off (its link down) until its standby
// serves and the ccm has written so, then brings it back: it must answer for nothing that
// moved, within a second of coming back, and the traffic stays on the standby.
func TestPartitionHeals(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	svc, addrs := c.createLBService(t, "partition")
	c.waitSettled(t)
	plan := c.plan(t, svc)
	owner, standby := c.Node(plan[0]), plan[1]
	var clients []*traffic.Client
	for _, a := range addrs {
		c.waitSteady(t, a, owner.Label)
		clients = append(clients, c.startClient(a))
	}
	defer func() {
		for _, l := range clients {
			l.Stop()
		}
	}()
	cut := time.Now()
	if err := owner.SetLink(false); err != nil {
		t.Fatal(err)
	}
	for _, l := range clients {
		waitSwitched(t, l, cut, standby)
	}
	c.waitAnnouncerSeen(t, svc, standby, 10*time.Second)
	announced := c.metricValue(t, owner, `baremetal_agent_announcements_total{family="IPv4"}`)
	back := time.Now()
	if err := owner.SetLink(true); err != nil {
		t.Fatal(err)
	}
	// Within a second it owns nothing, and from then on it stays so while the ccm
	// takes it up again.
	var quiet time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		quiet = time.Now()
		return c.owned(t, owner) == 0, nil
	})
	if err != nil || quiet.Sub(back) > time.Second {
		t.Fatalf("%s answers for %d addresses %v after it came back, want none within 1 s", owner.Label, c.owned(t, owner), time.Since(back))
	}
	st := c.waitSettled(t) // every agent up again, the returning one among them
	if got := st.Agent(owner.Label); got != "up" {
		t.Errorf("agent of %s is %s after the partition healed, want up", owner.Label, got)
	}
	if got := c.owned(t, owner); got != 0 {
		t.Errorf("%s answers for %d addresses once the ccm settled, want none: they moved", owner.Label, got)
	}
	if got := c.metricValue(t, owner, `baremetal_agent_announcements_total{family="IPv4"}`); got != announced {
		t.Errorf("%s sent %v announcements after it came back, want none", owner.Label, got-announced)
	}
	for i, l := range clients {
		reqs := l.Stop()
		if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return r.Start.After(back) && (!r.OK() || r.Node != standby) }); bad >= 0 {
			t.Errorf("%s: request at %v failed or reached %q after %s came back, want %s", addrs[i], reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, owner.Label, standby)
		}
	}
	if got := c.announcer(t, svc); got != standby {
		t.Errorf("announcer %s after the partition healed, want %s", got, standby)
	}
}

// TestCCMCutOffFromAgents drops every probe the ccm sends (UDP to the agents' port, in
// the ccm's namespace), with every node healthy: the ccm takes it for its own isolation,
// withdraws and moves nothing, says so, and once the probes pass again nothing has moved.
func TestCCMCutOffFromAgents(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	svc, addrs := c.createLBService(t, "isolated")
	c.waitSettled(t)
	owner := c.announcer(t, svc)
	// The first decision's event, recorded after the annotation, which waitSettled saw.
	changes := c.waitEvents(t, svc, "AnnouncerChanged", 1)
	var clients []*traffic.Client
	for _, a := range addrs {
		c.waitSteady(t, a, owner)
		clients = append(clients, c.startClient(a))
	}
	defer func() {
		for _, l := range clients {
			l.Stop()
		}
	}()
	heal := drop(t, c.Net.Bridge, "udp dport 7474", "")
	c.waitNodeEvent(t, owner, "ProbesLost")
	heal()
	c.waitNodeEvent(t, owner, "ProbesRestored")
	c.waitSettled(t)
	time.Sleep(300 * time.Millisecond) // a window of traffic after the ccm settled, three probe intervals
	for i, l := range clients {
		reqs := l.Stop()
		if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return !r.OK() || r.Node != owner }); bad >= 0 {
			t.Errorf("%s: request at %v failed or reached %q while the ccm was cut off, want %s throughout", addrs[i], reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, owner)
		}
	}
	if got := c.announcer(t, svc); got != owner {
		t.Errorf("announcer %s after the ccm's isolation, want %s", got, owner)
	}
	if got := c.countEvents(t, svc, "AnnouncerChanged"); got != changes {
		t.Errorf("%d AnnouncerChanged events after the ccm's isolation, want %d", got, changes)
	}
}

// waitEvents waits up to 10 s until at least n events of reason were recorded on svc, and
// returns how many were: events reach the API server after what they tell of.
func (c *cluster) waitEvents(t testing.TB, svc *corev1.Service, reason string, n int) int {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got = c.countEvents(t, svc, reason)
		return got >= n, nil
	})
	if err != nil {
		t.Fatalf("%d %s events on %s/%s after 10s, want at least %d", got, reason, svc.Namespace, svc.Name, n)
	}
	return got
}

// waitNodeEvent waits up to 10 s for an event of reason on Node node.
func (c *cluster) waitNodeEvent(t testing.TB, node, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, _ := events.List(ctx, c.Admin, metav1.NamespaceDefault, node, reason)
		return len(evs) > 0, nil
	})
	if err != nil {
		t.Fatalf("no %s event on Node %s", reason, node)
	}
}
