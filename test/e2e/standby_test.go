package e2e

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// manifestsLease are the leader-election settings of manifests/: the defaults of the
// upstream ccm, a 15 s lease.
var manifestsLease = []string{
	"--leader-elect-lease-duration=15s",
	"--leader-elect-renew-deadline=10s",
	"--leader-elect-retry-period=2s",
}

// waitLeads waits until the ccm p logs that it leads.
func waitLeads(t testing.TB, p *process.Process, since time.Time, within time.Duration) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		at = logTime(p.Logs(), since, `"Successfully acquired lease"`)
		return !at.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("%s does not lead %v after %s", p.Name(), within, since.Format("15:04:05.000"))
	}
	return at
}

// waitPlan waits until the Service's announcer annotation names node.
func (c *cluster) waitAnnouncer(t testing.TB, svc *corev1.Service, node string, within time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return c.announcer(t, svc) == node, nil
	})
	if err != nil {
		t.Fatalf("announcer %q %v later, want %s", c.announcer(t, svc), within, node)
	}
}

// outage stops the clients and returns each one's outage after failure, failing the test
// if one did not recover, served from elsewhere than node after it did, or took longer
// than bound.
func outage(t testing.TB, clients []*traffic.Client, addrs []netip.Addr, failure time.Time, node string, bound time.Duration) {
	t.Helper()
	for i, l := range clients {
		reqs := l.Stop()
		took, stray, ok := traffic.Outage(reqs, failure)
		t.Logf("%s: outage %v, %d stray losses", addrs[i], took, stray)
		if !ok || took > bound {
			t.Errorf("%s: outage %v (recovered: %v), want under %v", addrs[i], took, ok, bound)
			continue
		}
		after := failure.Add(took)
		if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return r.OK() && r.Node != node && r.Start.After(after) }); bad >= 0 {
			t.Errorf("%s: request at %v reached %s after the recovery, want %s", addrs[i], reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, node)
		}
	}
}

// TestLeaderDiesWithNode kills the node that runs both the leading ccm and the announcer
// of a Service, with the leader election of the manifests: the first standby takes the
// addresses over on its own long before the other ccm replica may lead, and that replica,
// once it leads, adopts what the agents did.
func TestLeaderDiesWithNode(t *testing.T) {
	c := newCluster(t, 3)
	x, z := c.Net.Nodes[0], c.Net.Nodes[2]
	start := time.Now()
	leader, err := c.StartCCMOn(context.Background(), x, manifestsLease...)
	if err != nil {
		t.Fatal(err)
	}
	waitLeads(t, leader, start, 30*time.Second)
	other, err := c.StartCCMOn(context.Background(), z, manifestsLease...)
	if err != nil {
		t.Fatal(err)
	}
	svc, addrs := c.createLBService(t, "leader", annotation.PreferredNodes, x.Label)
	c.waitSettled(t)
	plan := c.plan(t, svc)
	if plan[0] != x.Label || len(plan) < 2 {
		t.Fatalf("plan %v, want %s first and a standby", plan, x.Label)
	}
	standby := plan[1]
	var clients []*traffic.Client
	for _, a := range addrs {
		c.waitSteady(t, a, x.Label)
		clients = append(clients, c.startClient(a))
	}
	time.Sleep(200 * time.Millisecond) // paces the open-loop clients, as in killOwner
	died := time.Now()
	if err := x.SetLink(false); err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, l := range clients {
		waitSwitched(t, l, died, standby)
	}
	recovered := time.Since(died)
	t.Logf("%s died with the leader; %s serves %v later", x.Label, standby, recovered.Round(time.Millisecond))
	// The other replica leads only once the dead leader's lease has run out; by then the
	// agents have long moved on, and it must move nothing.
	led := waitLeads(t, other, died, 40*time.Second)
	t.Logf("%s leads %v after the death", other.Name(), led.Sub(died).Round(time.Millisecond))
	if led.Sub(died) < recovered {
		t.Errorf("the other ccm led %v after the death, before the addresses moved (%v): the test shows nothing", led.Sub(died), recovered)
	}
	c.waitAnnouncer(t, svc, standby, 15*time.Second)
	time.Sleep(500 * time.Millisecond) // a window of traffic after the adoption, five probe intervals
	outage(t, clients, addrs, died, standby, 2*time.Second)
}

// TestNodeDeathWithAPIServerDown kills the announcing node while the API server is
// stopped: the ccm's verdict reaches the standby on the probe channel, which takes over
// without a watch event. The node comes back before the API server and takes nothing
// back; once the API server is back, the new ccm adopts what the agents did and the
// annotations say so.
func TestNodeDeathWithAPIServerDown(t *testing.T) {
	cp := controlplane.StartForTest(t)
	c := newClusterOn(t, cp, 3)
	ccm := c.startCCM(t)
	svc, addrs := c.createLBService(t, "api-down-death")
	c.waitSettled(t)
	plan := c.plan(t, svc)
	owner, standby := plan[0], plan[1]
	var clients []*traffic.Client
	for _, a := range addrs {
		c.waitSteady(t, a, owner)
		clients = append(clients, c.startClient(a))
	}
	stopClients := func() {
		for _, l := range clients {
			l.Stop()
		}
	}
	stopped := time.Now()
	if err := cp.KillAPIServer(); err != nil {
		stopClients()
		t.Fatal(err)
	}
	// Known state first: the standby's watch is broken, so only the probe channel can
	// tell it to take over.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return watchBroken(c.Agent(standby).Logs(), stopped), nil
	})
	if err != nil {
		stopClients()
		t.Fatalf("the agent of %s logged no broken watch 10 s after the API server stopped", standby)
	}
	died := time.Now()
	if err := c.Node(owner).SetLink(false); err != nil {
		stopClients()
		t.Fatal(err)
	}
	for _, l := range clients {
		waitSwitched(t, l, died, standby)
	}
	t.Logf("%s died %v after the API server; %s serves %v after the death", owner, died.Sub(stopped).Round(time.Millisecond), standby, time.Since(died).Round(time.Millisecond))
	// The ccm cannot keep its lease without the API server, and exits, as the upstream
	// one does; a kubelet would start it again, and so does this test once the API
	// server is back.
	select {
	case <-ccm.Exited():
	case <-time.After(15 * time.Second):
		stopClients()
		t.Fatal("the ccm still runs 15 s after the API server stopped")
	}
	// The dead node comes back while there is neither API server nor ccm, its agent
	// still sure it announces: it asks its peers, learns that the standby stands in for
	// it, and stands down, so that the addresses stay where the traffic went.
	if err := c.Node(owner).SetLink(true); err != nil {
		stopClients()
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.metric(t, c.Node(owner), `baremetal_agent_owned_addresses{family="IPv4"}`) == "0", nil
	})
	if err != nil {
		stopClients()
		t.Fatalf("the agent of %s still answers for its addresses 10 s after it came back with %s standing in", owner, standby)
	}
	if err := cp.RestartAPIServer(context.Background()); err != nil {
		stopClients()
		t.Fatal(err)
	}
	c.startCCM(t)
	c.waitAnnouncer(t, svc, standby, 30*time.Second)
	time.Sleep(500 * time.Millisecond) // a window of traffic after the adoption, five probe intervals
	// Well under the 2 s the ccm keeps running without the API server here: the
	// verdict moved the addresses, not the agents' own checks once no ccm was left.
	outage(t, clients, addrs, died, standby, time.Second)
	if _, err := c.WaitSettled(context.Background()); err != nil {
		t.Errorf("after the adoption: %v", err) // every agent up again: nothing is held
	}
}

// TestLeaderChangeMovesNothing kills the leading ccm of two, with every node healthy: the
// agents check their peers while no ccm is heard, find them all up, and the new leader
// changes no announcer.
func TestLeaderChangeMovesNothing(t *testing.T) {
	c := newCluster(t, 3)
	start := time.Now()
	leader, err := c.StartCCMOn(context.Background(), c.Net.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	waitLeads(t, leader, start, 30*time.Second)
	other, err := c.StartCCMOn(context.Background(), c.Net.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	svc, addrs := c.createLBService(t, "leader-change")
	c.waitSettled(t)
	owner := c.announcer(t, svc)
	// The event of the first choice is recorded asynchronously: counted before it lands,
	// it would be taken for a change the leader change made.
	c.waitEvent(t, svc, "AnnouncerChanged", owner)
	changes := c.countEvents(t, svc, "AnnouncerChanged")
	c.waitSteady(t, addrs[0], owner)
	l := c.startClient(addrs[0])
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeads(t, other, killed, 15*time.Second)
	if _, err := c.WaitSettled(context.Background()); err != nil {
		l.Stop()
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a window of traffic after the new leader settled
	reqs := l.Stop()
	if bad := slices.IndexFunc(reqs, func(r traffic.Request) bool { return !r.OK() || r.Node != owner }); bad >= 0 {
		t.Errorf("request at %v failed or reached %q during the leader change, want %s: %v", reqs[bad].Start.Format("15:04:05.000"), reqs[bad].Node, owner, reqs[bad].Err)
	}
	if got := c.announcer(t, svc); got != owner {
		t.Errorf("announcer %s after the leader change, want %s", got, owner)
	}
	if got := c.countEvents(t, svc, "AnnouncerChanged"); got != changes {
		t.Errorf("%d AnnouncerChanged events after the leader change, want %d", got, changes)
	}
	for _, h := range c.Net.Nodes {
		if got := c.metric(t, h, "baremetal_agent_peers_found_down_total"); got != "0" {
			t.Errorf("%s found %s peers down while no ccm was heard, want 0", h.Label, got)
		}
	}
}
