package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
)

// wireCheckConfig is cloudConfig with the wire check asking every second, not every 20.
const wireCheckConfig = cloudConfig + `announcements:
  checkInterval: 1s
`

// TestWireCheck breaks only the announcer's ARP answers for one address, with a filter on
// its link that drops the ARP replies sent from that address: the agent still answers
// the probes, the node's kernel still answers for the node's own address, and clients get
// nothing. The first standby, which asks for the address as a client does, must say so in
// an AddressUnanswered event, for that address alone (the IPv6 one is answered), and in
// an AddressAnswered event once the filter goes. Then the standby's own link drops every
// ARP frame that comes in: its rounds say nothing (Blind), and it reports nothing.
func TestWireCheck(t *testing.T) {
	c := newClusterWith(t, controlplane.Shared(t), 3, wireCheckConfig)
	node1, node2 := c.Net.Nodes[0], c.Net.Nodes[1]
	svc := c.createService(t, "web", vip4, vip6)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, annotation.Announcer, node1.Label, annotation.Standbys, node2.Label+","+c.Net.Nodes[2].Label)
	if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitReach(t, vip4, node1.Label)
	checks := func(family, outcome string) int {
		n, _ := strconv.Atoi(c.metric(t, node2, fmt.Sprintf(`baremetal_agent_wire_checks_total{family=%q,outcome=%q}`, family, outcome)))
		return n
	}
	c.waitFor(t, "node2 checks both addresses, answered", 10*time.Second, func() bool {
		return c.metric(t, node2, "baremetal_agent_wire_checked_addresses") == "2" && checks("IPv4", "Answered") > 0 && checks("IPv6", "Answered") > 0
	})

	// ARP frames from the Service's IPv4 address leave node1 no more: its agent's replies,
	// sent on a packet socket, pass the link's egress hook like any frame.
	nft(t, node1, "add table netdev wirecheck",
		"add chain netdev wirecheck out { type filter hook egress device eth0 priority 0 ; }",
		"add rule netdev wirecheck out arp saddr ip "+vip4.String()+" drop")
	broke := time.Now()
	c.waitEvent(t, svc, servicewatch.ReasonAddressUnanswered, "asked for "+vip4.String())
	t.Logf("AddressUnanswered for %s %v after its replies were dropped", vip4, time.Since(broke).Round(time.Millisecond))
	if got := c.metric(t, node2, "baremetal_agent_dark_addresses"); got != "1" {
		t.Errorf("node2: baremetal_agent_dark_addresses = %q, want 1: only the IPv4 address is dark", got)
	}
	if n := c.countEvents(t, svc, servicewatch.ReasonAddressUnanswered); n != 1 {
		t.Errorf("%d AddressUnanswered events, want 1", n)
	}

	nft(t, node1, "delete table netdev wirecheck")
	c.waitEvent(t, svc, servicewatch.ReasonAddressAnswered, vip4.String())

	// node2's own link drops every ARP frame that comes in: it hears neither the address
	// nor node1's own, and must blame nobody.
	nft(t, node2, "add table netdev wirecheck",
		"add chain netdev wirecheck in { type filter hook ingress device eth0 priority 0 ; }",
		"add rule netdev wirecheck in meta protocol arp drop")
	blind := checks("IPv4", "Blind")
	c.waitFor(t, "node2's IPv4 rounds go blind, three of them", 10*time.Second, func() bool { return checks("IPv4", "Blind") >= blind+3 })
	if n := c.countEvents(t, svc, servicewatch.ReasonAddressUnanswered); n != 1 {
		t.Errorf("%d AddressUnanswered events after node2's own link went deaf to ARP, want still 1", n)
	}
	if got := c.metric(t, node2, "baremetal_agent_dark_addresses"); got != "0" {
		t.Errorf("node2: baremetal_agent_dark_addresses = %q with its own link deaf, want 0", got)
	}
}

// waitFor waits until ok, polling, and fails the test after within.
func (c *cluster) waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) { return ok(), nil })
	if err != nil {
		t.Fatalf("not within %v: %s", within, what)
	}
}
