package announcer

import (
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// TestAnnouncerFollowsWhatAgentsCanAnnounce checks that a node whose agent cannot announce
// a family of a pool loses the groups holding such an address, with an event saying why,
// and keeps the others.
func TestAnnouncerFollowsWhatAgentsCanAnnounce(t *testing.T) {
	v4, v6 := lbService("v4", "198.51.100.1"), lbService("v6", "2001:db8::1")
	// Without rebalancing: of two groups on two nodes, node-a holds one over its bound, and
	// this test is of what the agents can announce.
	tc := newTestControllerWithConfig(t, defaultConfig+"failover:\n  rebalance: false\n",
		announcedBy(v4, "node-a"), announcedBy(v6, "node-a"), node("node-a", nil), node("node-b", nil))
	tc.syncKey(t, "address/198.51.100.1")
	tc.syncKey(t, "address/2001:db8::1")
	tc.settle(t, "v4", "v6")
	if a, b := tc.announcer(t, "v4"), tc.announcer(t, "v6"); a != "node-a" || b != "node-a" {
		t.Fatalf("announcers %s and %s, want node-a for both", a, b)
	}
	tc.events()

	tc.health.setUnable("node-a", probe.Unable{Pool: "default", Family: iprange.IPv6, Reason: probe.NoAddress, Interface: "eth0"})
	tc.syncKey(t, "address/198.51.100.1")
	tc.syncKey(t, "address/2001:db8::1")
	if got := tc.announcer(t, "v4"); got != "node-a" {
		t.Errorf("IPv4 announcer %s, want node-a kept", got)
	}
	if got := tc.announcer(t, "v6"); got != "node-b" {
		t.Errorf("IPv6 announcer %s, want node-b", got)
	}
	ev := tc.events()
	if len(ev) != 1 || !strings.Contains(ev[0], "node-a has no IPv6 address on eth0") {
		t.Errorf("events %q, want one AnnouncerChanged saying node-a has no IPv6 address on eth0", ev)
	}

	tc.health.setUnable("node-b", probe.Unable{Pool: "default", Family: iprange.IPv6, Reason: probe.NoUpInterface})
	tc.settle(t, "v6")
	tc.syncKey(t, "address/2001:db8::1")
	if got := tc.announcer(t, "v6"); got != "" {
		t.Errorf("IPv6 announcer %q with no node able, want none", got)
	}
	if ev := tc.events(); len(ev) != 1 || !strings.Contains(ev[0], "node-b has no up interface for pool default") {
		t.Errorf("events %q, want a NoAnnouncer saying node-b has no up interface for pool default", ev)
	}
}

// TestLostFamilyKeepsTheOther checks that a dual-stack Service whose IPv6 address no node
// can announce keeps its IPv4 address announced, with one PartlyAnnounced warning naming
// the family and why, and moves whole to a node that can announce both once there is one.
func TestLostFamilyKeepsTheOther(t *testing.T) {
	dual := lbService("dual", "198.51.100.1", "2001:db8::1")
	tc := newTestController(t, announcedBy(dual, "node-a"), node("node-a", nil), node("node-b", nil))
	tc.syncKey(t, "address/198.51.100.1")
	tc.settle(t, "dual")
	tc.events()

	for _, n := range []string{"node-a", "node-b"} {
		tc.health.setUnable(n, probe.Unable{Pool: "default", Family: iprange.IPv6, Reason: probe.NoAddress, Interface: "eth0"})
	}
	tc.syncKey(t, "address/198.51.100.1")
	if got := tc.announcer(t, "dual"); got != "node-a" {
		t.Errorf("announcer %q with no node able to announce IPv6, want node-a kept for IPv4", got)
	}
	ev := tc.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning PartlyAnnounced No node can announce the IPv6 addresses of pool default: node-a has no IPv6 address on eth0, node-b has no IPv6 address on eth0; node-a announces") {
		t.Errorf("events %q, want one PartlyAnnounced warning naming the IPv6 addresses of pool default and why", ev)
	}
	tc.syncKey(t, "address/198.51.100.1")
	if ev := tc.events(); len(ev) != 0 {
		t.Errorf("events %q on a sync that changed nothing, want none", ev)
	}

	tc.health.setUnable("node-b")
	tc.syncKey(t, "address/198.51.100.1")
	if got := tc.announcer(t, "dual"); got != "node-b" {
		t.Errorf("announcer %q once node-b can announce both families, want node-b", got)
	}
	if ev := tc.events(); len(ev) != 1 || !strings.Contains(ev[0], "AnnouncerChanged") {
		t.Errorf("events %q, want one AnnouncerChanged and no warning", ev)
	}
}
