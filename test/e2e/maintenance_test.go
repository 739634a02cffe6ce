package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// setNodeDrain writes the drain annotation of a Node, as kubectl annotate does, or
// removes it for "".
func (c *cluster) setNodeDrain(t testing.TB, node, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotation.Drain: v}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setOutOfService adds the taint node.kubernetes.io/out-of-service to a Node, as kubectl
// taint does, or removes it.
func (c *cluster) setOutOfService(t testing.TB, node string, on bool) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
	if on {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	}
	if _, err := c.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDrain drains the announcer with lb.baremetal.io/drain=true under the open-loop
// client: every address moves to the first standby, and no request fails but one whose
// connection was open at the instant its address moved (layer 2 moves the address, not
// the connections; see TestUpgrade).
//
// The new announcer learns of the move late, as an agent whose watch lags does: its
// connection to the API server is cut, so only the ccm's duty tells it, DutyTolerance
// after the move. And the client asks for the addresses afresh all the while (its
// neighbour table emptied every 20 ms while the new announcer cannot have the addresses
// yet), as a new client, or one whose entry expired, does. So the drained node must keep
// answering until the new announcer does: without its linger the client's requests go
// unanswered.
//
// Then the annotation is removed: the node stands by again, and takes nothing back.
func TestDrain(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	svc, addrs := c.createLBService(t, "drain")
	c.waitSettled(t)
	plan := c.plan(t, svc)
	if len(plan) < 2 {
		t.Fatalf("plan %v, want an announcer and a standby", plan)
	}
	from, to := c.Node(plan[0]), c.Node(plan[1])
	for _, a := range addrs {
		c.waitSteady(t, a, from.Label)
	}
	heal := c.cutFromAPIServer(t, to)
	defer heal()

	clients := map[netip.Addr]*traffic.Client{}
	for _, a := range addrs {
		clients[a] = c.startClient(a)
	}
	defer func() {
		for _, l := range clients {
			l.Stop()
		}
	}()
	// Paces the open-loop clients: they run at their full rate when the drain comes.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	c.setNodeDrain(t, from.Label, "true")
	moved := c.waitAnnouncerSeen(t, svc, to.Label, 10*time.Second)
	// The new announcer, cut off, takes the addresses from the ccm's duty no sooner than
	// DutyTolerance after the move; in the first half of that time the client resolves
	// them afresh every 20 ms, and only the drained node's linger answers it. (Later, while
	// both nodes answer, a client that resolves afresh may hear one, then the other,
	// within one handshake: the test stays clear of that.)
	for time.Since(moved) < servicewatch.DutyTolerance/2 {
		if err := c.Net.Client.FlushNeighbors(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the client's requests resolve meanwhile
	}
	answered, ok := c.waitAnswering(t, to, len(addrs), 5*time.Second)
	if !ok {
		t.Fatalf("%s, cut off from the API server, answers for %d of %d addresses 5 s after the drain moved them to it", to.Label, c.owned(t, to), len(addrs))
	}
	t.Logf("%s answered for the addresses %v after the move was seen", to.Label, answered.Sub(moved).Round(time.Millisecond))
	for _, l := range clients {
		waitSwitched(t, l, moved, to.Label)
	}
	// The drained node's linger is bounded: it stops answering soon after.
	stopped, ok := c.waitAnswering(t, from, 0, servicewatch.DrainLinger+3*time.Second)
	if !ok {
		t.Errorf("%s, drained, still answers for %d addresses %v after the move", from.Label, c.owned(t, from), servicewatch.DrainLinger+3*time.Second)
	} else {
		t.Logf("%s stopped answering %v after the move was seen", from.Label, stopped.Sub(moved).Round(time.Millisecond))
	}
	heal()
	// A little more traffic after the move, for what follows it.
	time.Sleep(300 * time.Millisecond)

	for a, l := range clients {
		reqs := l.Stop()
		moves := c.moves(a, start, from.Label)
		failed, excused := checkMoves(t, a, reqs, moves)
		if len(moves) != 1 {
			t.Errorf("%s moved %d times (at %v), want once, to %s", a, len(moves), formatTimes(moves), to.Label)
		}
		t.Logf("%s: %d requests over the drain, %d failed (%d open when the address moved)", a, len(reqs), failed, excused)
	}
	c.waitEvent(t, svc, "AnnouncerChanged", from.Label+" is drained by the annotation "+annotation.Drain)

	c.setNodeDrain(t, from.Label, "")
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Contains(c.plan(t, svc)[1:], from.Label), nil
	})
	if err != nil {
		t.Errorf("plan %v 10 s after the drain annotation went, want %s a standby again", c.plan(t, svc), from.Label)
	}
	if got := c.announcer(t, svc); got != to.Label {
		t.Errorf("announcer %s once %s is no longer drained, want %s kept: no failback", got, from.Label, to.Label)
	}
}

// TestOutOfServiceTaint taints the announcer's node node.kubernetes.io/out-of-service
// while its agent answers every probe: the ccm takes it for down at once, and its
// standby answers for the addresses within 2 s, on the verdict, without the node's probes
// ever failing.
func TestOutOfServiceTaint(t *testing.T) {
	c := newCluster(t, 3)
	ccm := c.startCCM(t)
	svc, addrs := c.createLBService(t, "out-of-service")
	c.waitSettled(t)
	plan := c.plan(t, svc)
	if len(plan) < 2 {
		t.Fatalf("plan %v, want an announcer and a standby", plan)
	}
	from, to := c.Node(plan[0]), c.Node(plan[1])
	for _, a := range addrs {
		c.waitSteady(t, a, from.Label)
	}
	tainted := time.Now()
	c.setOutOfService(t, from.Label, true)
	defer c.setOutOfService(t, from.Label, false)
	const bound = 2 * time.Second
	at, ok := c.waitAnswering(t, to, len(addrs), bound)
	if !ok {
		t.Fatalf("%s answers for %d of %d addresses %v after %s was tainted out of service", to.Label, c.owned(t, to), len(addrs), bound, from.Label)
	}
	t.Logf("%s answered %v after %s was tainted", to.Label, at.Sub(tainted).Round(time.Millisecond), from.Label)
	for _, a := range addrs {
		c.waitSteady(t, a, to.Label)
	}
	if got := c.announcer(t, svc); got != to.Label {
		t.Errorf("announcer %s, want %s", got, to.Label)
	}
	c.waitEvent(t, svc, "AnnouncerChanged", from.Label+" is out of service by the taint "+corev1.TaintNodeOutOfService)
	if at := logTime(ccm.Logs(), tainted, `"Verdict changed"`, from.Label); at.IsZero() {
		t.Errorf("the ccm logged no verdict naming %s after the taint", from.Label)
	}
	if at := logTime(ccm.Logs(), tainted, `"Agent state changed"`, `node="`+from.Label+`"`, `state="down"`); !at.IsZero() {
		t.Errorf("the ccm took %s's agent for down by its probes at %s: the test is of the taint alone", from.Label, at.Format("15:04:05.000"))
	}
}
