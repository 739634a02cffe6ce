package e2e

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

var (
	vip4 = netip.MustParseAddr("198.18.0.100")
	vip6 = netip.MustParseAddr("fd00:198:18::100")
)

// moveDeadline is how soon after the annotation changes the client's kernel must have
// the new announcer's MAC.
const moveDeadline = 100 * time.Millisecond

// waitReach waits until a connection from the client to addr reaches node.
func (c *cluster) waitReach(t *testing.T, addr netip.Addr, node string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = c.reach(addr); err == nil && got == node {
			return
		}
		time.Sleep(50 * time.Millisecond) // polls
	}
	t.Fatalf("connection to %s reached %q (%v), want %s", addr, got, err, node)
}

// waitNeighbor waits until the client's neighbour entry for addr has mac, and returns
// how long after since that was.
func (c *cluster) waitNeighbor(t *testing.T, addr netip.Addr, mac net.HardwareAddr, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	for {
		got, state, err := c.Net.Client.Neighbor(addr)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got, mac) {
			return time.Since(since)
		}
		if time.Since(since) > within {
			t.Fatalf("client's neighbour entry for %s is %v (%s) %v after the move, want %v", addr, got, state, within, mac)
		}
		time.Sleep(time.Millisecond) // polls
	}
}

func TestAnnounce(t *testing.T) {
	c := newCluster(t, 2)
	node1, node2 := c.Net.Nodes[0], c.Net.Nodes[1]
	svc := c.createService(t, "web", vip4, vip6)

	c.setAnnouncer(t, svc, node1.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		c.waitReach(t, addr, node1.Label)
		if mac, state, _ := c.Net.Client.Neighbor(addr); !bytes.Equal(mac, node1.MAC) {
			t.Errorf("client resolves %s to %v (%s), want node1's %v", addr, mac, state, node1.MAC)
		}
	}

	// The move: the client's kernel must switch on the announcement alone, without
	// asking (its entry is fresh, so it would not ask for seconds).
	start := c.setAnnouncer(t, svc, node2.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		took := c.waitNeighbor(t, addr, node2.MAC, start, moveDeadline)
		t.Logf("%s moved to node2's MAC %v after the annotation changed", addr, took)
		c.waitReach(t, addr, node2.Label)
	}

	// Two moves within a second: the second announcement must not be dropped by the
	// client's ARP locktime, and both must take effect.
	first := c.setAnnouncer(t, svc, node1.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		c.waitNeighbor(t, addr, node1.MAC, first, moveDeadline)
	}
	// The timer under test: the second move comes 300 ms after the first, inside the
	// client's 1 s ARP locktime.
	time.Sleep(time.Until(first.Add(300 * time.Millisecond)))
	second := c.setAnnouncer(t, svc, node2.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		took := c.waitNeighbor(t, addr, node2.MAC, second, moveDeadline)
		t.Logf("%s moved back to node2 %v after the second move, %v after the first", addr, took, time.Since(first))
		c.waitReach(t, addr, node2.Label)
	}
	if got := c.metric(t, node2, `baremetal_agent_owned_addresses{family="IPv4"}`); got != "1" {
		t.Errorf("node2 owns %q IPv4 addresses, want 1", got)
	}
	if got := c.metric(t, node1, `baremetal_agent_owned_addresses{family="IPv6"}`); got != "0" {
		t.Errorf("node1 owns %q IPv6 addresses, want 0", got)
	}
}

// TestTypeChangeWithdraws changes an announced Service's type to ClusterIP: the agent,
// which watches only LoadBalancer Services, is told it is gone, and stops answering for
// its addresses (the ccm, which would release them, does not run here).
func TestTypeChangeWithdraws(t *testing.T) {
	c := newCluster(t, 2)
	node1 := c.Net.Nodes[0]
	svc := c.createService(t, "retyped", vip4, vip6)
	c.setAnnouncer(t, svc, node1.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		c.waitReach(t, addr, node1.Label)
	}
	patch := []byte(`{"spec":{"type":"ClusterIP","allocateLoadBalancerNodePorts":null}}`)
	if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return c.owned(t, node1) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s still answers for %d addresses 5 s after the Service became a ClusterIP one", node1.Label, c.owned(t, node1))
	}
}

func TestAddressOutsidePoolsIsNotAnnounced(t *testing.T) {
	c := newCluster(t, 1)
	node1 := c.Net.Nodes[0]
	stray := netip.MustParseAddr("198.18.0.180") // on the link, in no pool
	inPool := netip.MustParseAddr("198.18.0.101")
	c.setAnnouncer(t, c.createService(t, "stray", stray), node1.Label)
	c.setAnnouncer(t, c.createService(t, "good", inPool), node1.Label)

	// Once the agent answers for the good address, it has seen both Services.
	c.waitReach(t, inPool, node1.Label)
	if got := c.metric(t, node1, `baremetal_agent_refused_addresses{reason="NotInPool"}`); got != "1" {
		t.Errorf("refused NotInPool = %q, want 1", got)
	}
	// On the wire: nobody answers the client's ARP requests for the stray address.
	if node, err := c.reach(stray); err == nil {
		t.Errorf("client reached %s, which is in no pool, on %s", stray, node)
	}
	if mac, state, _ := c.Net.Client.Neighbor(stray); mac != nil {
		t.Errorf("client resolved %s to %v (%s)", stray, mac, state)
	}
}

// probeFrom sends one health probe from the client to a node's agent.
func probeFrom(t *testing.T, key *probe.Key, client, node *netns.Host, nonce uint64) (probe.Reply, error) {
	t.Helper()
	var reply probe.Reply
	err := client.Do(func() error {
		conn, err := net.ListenPacket("udp", ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		to := &net.UDPAddr{IP: node.IPv4.AsSlice(), Port: 7474}
		if _, err := conn.WriteTo(key.AppendRequest(nil, probe.Request{Nonce: nonce, Sender: probe.FromAgent, Instance: probe.NewInstance(), Counter: 1, To: probe.NodeTag(node.Label)}), to); err != nil {
			return err
		}
		if err := conn.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		b := make([]byte, probe.MaxDatagram)
		n, _, err := conn.ReadFrom(b)
		if err != nil {
			return err
		}
		reply, err = key.ParseReply(b[:n])
		return err
	})
	return reply, err
}

func TestHealthAndDrain(t *testing.T) {
	c := newCluster(t, 1)
	node1 := c.Net.Nodes[0]
	svc := c.createService(t, "drained", vip4)
	c.setAnnouncer(t, svc, node1.Label)
	c.waitReach(t, vip4, node1.Label)

	// From another namespace on the bridge, without the key: no answer at all, and the
	// agent counts it.
	stranger, err := probe.ParseKey([]byte("a key of someone else on the network\n"))
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := probeFrom(t, stranger, c.Net.Client, node1, 6); err == nil {
		t.Errorf("a probe without the key was answered: %+v", reply)
	}
	if got := c.metric(t, node1, `baremetal_agent_probes_total{outcome="unauthenticated"}`); got != "1" {
		t.Errorf("unauthenticated probes counted: %q, want 1", got)
	}
	reply, err := probeFrom(t, c.Key, c.Net.Client, node1, 7)
	if err != nil || reply.Nonce != 7 || reply.State != probe.Ready || reply.Node != node1.Label || len(reply.Covers) > 0 {
		t.Fatalf("probe = %+v, %v; want node1 ready with nonce 7", reply, err)
	}

	// SIGTERM: the agent drains — still answering, and saying so — for its grace period
	// (2 s here), since a Service still names it, and then exits cleanly.
	agent := c.Agent(node1.Label)
	stopped := make(chan error, 1)
	signalled := time.Now()
	go func() { stopped <- agent.Stop(10 * time.Second) }()
	// Probe until the agent says it drains, well inside its grace period, so that what
	// follows is checked while it drains.
	var draining probe.Reply
	for nonce := uint64(8); time.Since(signalled) < time.Second; nonce++ {
		var err error
		if draining, err = probeFrom(t, c.Key, c.Net.Client, node1, nonce); err == nil && draining.State == probe.Draining {
			break
		}
		time.Sleep(10 * time.Millisecond) // between probes
	}
	if draining.State != probe.Draining {
		t.Errorf("probe 1 s after SIGTERM = %+v; want draining", draining)
	}
	t.Logf("draining reported %v after SIGTERM", time.Since(signalled))
	if err := c.Net.Client.FlushNeighbors(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.reach(vip4); err != nil || got != node1.Label {
		t.Errorf("while draining, connection reached %q (%v), want node1", got, err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("agent exit: %v", err)
	}
	if took := time.Since(signalled); took < 2*time.Second || took > 5*time.Second {
		t.Errorf("agent exited %v after SIGTERM, want its 2 s grace period", took)
	}
}

func TestInterfaceChanges(t *testing.T) {
	c := newCluster(t, 1)
	node1 := c.Net.Nodes[0]
	ctx := context.Background()

	// An address on no subnet of the node: reported on the Service, not announced.
	late := netip.MustParseAddr("198.18.5.5")
	svc := c.createService(t, "late", late)
	c.setAnnouncer(t, svc, node1.Label)
	c.waitEvent(t, svc, "NoInterface", "Node node1 does not announce 198.18.5.5: no up interface has a subnet containing it")
	if got := c.metric(t, node1, "baremetal_agent_addresses_without_interface"); got != "1" {
		t.Errorf("addresses without interface = %q, want 1", got)
	}
	// The subnet appears on eth0: picked up without a restart.
	if _, err := c.Net.Client.Run(ctx, "ip", "addr", "add", "198.18.5.200/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := node1.Run(ctx, "ip", "addr", "add", "198.18.5.1/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	c.waitReach(t, late, node1.Label)

	// The link goes down and comes back: the address is announced again, so a client
	// that meanwhile learnt another MAC for it comes back.
	if err := node1.SetLink(false); err != nil {
		t.Fatal(err)
	}
	elsewhere := "02:00:00:00:00:99"
	if _, err := c.Net.Client.Run(ctx, "ip", "neigh", "replace", late.String(), "lladdr", elsewhere, "nud", "stale", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	if err := node1.SetLink(true); err != nil {
		t.Fatal(err)
	}
	took := c.waitNeighbor(t, late, node1.MAC, up, 3*time.Second)
	t.Logf("re-announced %v after the link came up", took)
	c.waitReach(t, late, node1.Label)
}

// waitEvent waits for an event on svc with reason whose message contains text.
func (c *cluster) waitEvent(t *testing.T, svc *corev1.Service, reason, text string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		msg, _ := events.Find(ctx, c.Admin, svc.Namespace, svc.Name, reason, text)
		return msg != "", nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s/%s saying %q", reason, svc.Namespace, svc.Name, text)
	}
}

// TestUnicastRefresh checks the requests a client sends to refresh a stale entry: unicast
// to the announcer's MAC (ARP requests and neighbour solicitations). Unanswered, the client
// would take three seconds of probes to give up and ask by broadcast or multicast.
func TestUnicastRefresh(t *testing.T) {
	c := newCluster(t, 1)
	node1 := c.Net.Nodes[0]
	ctx := context.Background()
	svc := c.createService(t, "refresh", vip4, vip6)
	c.setAnnouncer(t, svc, node1.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		c.waitReach(t, addr, node1.Label)
	}
	// Probe at once instead of after the usual 5 s in DELAY.
	for _, f := range []string{"ipv4", "ipv6"} {
		if _, err := c.Net.Client.Run(ctx, "sysctl", "-qw", "net."+f+".neigh.eth0.delay_first_probe_time=0"); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range []netip.Addr{vip4, vip6} {
		if _, err := c.Net.Client.Run(ctx, "ip", "neigh", "change", addr.String(), "lladdr", node1.MAC.String(), "nud", "stale", "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
		before := c.metric(t, node1, `baremetal_agent_requests_total{family="`+family(addr)+`"}`)
		// A datagram confirms nothing to the neighbour table, so the kernel must probe;
		// none comes back (kube-proxy answers no echo for a Service address either).
		conn, err := c.Net.Client.Dial(ctx, "udp", netip.AddrPortFrom(addr, 9).String())
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Write([]byte("refresh"))
		conn.Close()
		if err != nil {
			t.Fatalf("send to %s: %v", addr, err)
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		for {
			mac, state, err := c.Net.Client.Neighbor(addr)
			if err != nil {
				t.Fatal(err)
			}
			if state == "REACHABLE" && bytes.Equal(mac, node1.MAC) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s entry %v %s 500 ms after the probe began, want REACHABLE at node1's MAC", addr, mac, state)
			}
			time.Sleep(5 * time.Millisecond) // polls
		}
		if after := c.metric(t, node1, `baremetal_agent_requests_total{family="`+family(addr)+`"}`); after == before {
			t.Errorf("%s: the agent counted no request (%s before and after): someone else answered the probe", addr, after)
		}
	}
}

// TestPoolRemovedFromConfig checks that an address stops being announced when its pool
// leaves the cloud-config file, without a restart, and comes back with it.
func TestPoolRemovedFromConfig(t *testing.T) {
	c := newCluster(t, 1)
	node1 := c.Net.Nodes[0]
	svc := c.createService(t, "config", vip4)
	c.setAnnouncer(t, svc, node1.Label)
	c.waitReach(t, vip4, node1.Label)

	refused := func() int {
		n, _ := strconv.Atoi(c.metric(t, node1, `baremetal_agent_refused_addresses{reason="NotInPool"}`))
		return n
	}
	before := refused()
	original, err := os.ReadFile(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	without := strings.Replace(string(original), "- name: e2e\n", "- name: e2e-moved\n", 1)
	without = strings.Replace(without, "198.18.0.100-198.18.0.150", "198.18.0.160-198.18.0.170", 1)
	if err := os.WriteFile(c.Config, []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return refused() == before+1, nil
	})
	if err != nil {
		t.Fatalf("the agent still announces %s after its pool left the cloud-config", vip4)
	}
	if err := c.Net.Client.FlushNeighbors(); err != nil {
		t.Fatal(err)
	}
	if node, err := c.reach(vip4); err == nil {
		t.Errorf("client reached %s, whose pool is gone, on %s", vip4, node)
	}
	if mac, state, _ := c.Net.Client.Neighbor(vip4); mac != nil {
		t.Errorf("client resolved %s, whose pool is gone, to %v (%s)", vip4, mac, state)
	}

	if err := os.WriteFile(c.Config, original, 0o644); err != nil {
		t.Fatal(err)
	}
	c.waitReach(t, vip4, node1.Label)
}
