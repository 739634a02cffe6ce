package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
)

// conflictReportBound is how soon after another host claims an address its announcer must
// have said so in an event.
const conflictReportBound = time.Second

// TestDuplicateAddress puts a host on the segment that takes a Service's addresses for
// its own, the way a server configured by hand or a VM restored from a snapshot does: it
// sends from the IPv4 address, and runs duplicate address detection for the IPv6 one. The announcer must say so in a
// DuplicateAddress event naming the host's hardware address within a second, and go on
// announcing: nothing moves because of it.
func TestDuplicateAddress(t *testing.T) {
	c := newCluster(t, 2)
	node1 := c.Net.Nodes[0]
	svc := c.createService(t, "web", vip4, vip6)
	c.setAnnouncer(t, svc, node1.Label)
	for _, addr := range []netip.Addr{vip4, vip6} {
		c.waitReach(t, addr, node1.Label)
	}
	held := time.Now() // node1 has announced both since before
	stranger, err := c.Net.AddHost("stranger")
	if err != nil {
		t.Fatal(err)
	}
	// The timer under test: claims of an address in the first 3 s after gaining it are
	// the previous announcer's last words, not conflicts.
	time.Sleep(time.Until(held.Add(3 * time.Second)))

	// IPv4: the stranger's only address is the Service's, and it talks from it: its
	// kernel asks for the address it sends to, in an ARP request from the Service's.
	if _, err := stranger.IP("addr", "flush", "dev", "eth0", "scope", "global"); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.IP("addr", "add", vip4.String()+"/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Whether the answer comes back to the stranger or to node1 does not matter here.
	_ = stranger.Ping(c.Net.Bridge.IPv4, 200*time.Millisecond)
	took := c.waitConflict(t, svc.Namespace, svc.Name, start, stranger.MAC.String()+" sent an ARP request from it")
	t.Logf("DuplicateAddress for %s %v after the stranger sent from it", vip4, took)

	// IPv6: the stranger configures the address the usual way, with duplicate address
	// detection, which the announcer's answer makes fail.
	// DAD starts after a random delay below the router solicitation delay, a second by
	// default: none here, so that the bound is the agent's alone.
	for _, sc := range [][2]string{{"accept_dad", "1"}, {"router_solicitation_delay", "0"}} {
		if err := stranger.SetSysctl("net/ipv6/conf/eth0/"+sc[0], sc[1]); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	if _, err := stranger.IP("addr", "add", vip6.String()+"/64", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	took = c.waitConflict(t, svc.Namespace, svc.Name, start, stranger.MAC.String()+" ran duplicate address detection for it")
	t.Logf("DuplicateAddress for %s %v after the stranger added it", vip6, took)
	if out, _ := stranger.IP("-6", "addr", "show", "dev", "eth0"); !strings.Contains(out, "dadfailed") {
		t.Errorf("the stranger's %s passed duplicate address detection, want it failed on the announcer's answer:\n%s", vip6, out)
	}

	// Nothing moved: node1 still owns both, and counts the conflicts.
	for _, sample := range []string{`baremetal_agent_owned_addresses{family="IPv4"}`, `baremetal_agent_owned_addresses{family="IPv6"}`} {
		if got := c.metric(t, node1, sample); got != "1" {
			t.Errorf("node1: %s = %q, want 1", sample, got)
		}
	}
	if got := c.metric(t, node1, "baremetal_agent_conflicted_addresses"); got != "2" {
		t.Errorf("node1: baremetal_agent_conflicted_addresses = %q, want 2", got)
	}
}

// waitConflict waits for a DuplicateAddress event on the Service namespace/name whose
// message holds text, and returns how long after start it came; it fails the test if that
// is more than conflictReportBound.
func (c *cluster) waitConflict(t *testing.T, namespace, name string, start time.Time, text string) time.Duration {
	t.Helper()
	for {
		msg, err := events.Find(context.Background(), c.Admin, namespace, name, servicewatch.ReasonDuplicateAddress, text)
		if err != nil {
			t.Fatal(err)
		}
		if msg != "" {
			took := time.Since(start)
			if took > conflictReportBound {
				t.Errorf("DuplicateAddress event %v after the claim, want within %v: %s", took, conflictReportBound, msg)
			}
			return took
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no DuplicateAddress event saying %q within 10s", text)
		}
		time.Sleep(20 * time.Millisecond) // polls
	}
}
