package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// startCCM runs the real ccm in the bridge's namespace until the test ends, with extra
// arguments after the testbed's.
func (c *cluster) startCCM(t testing.TB, extra ...string) *process.Process {
	t.Helper()
	p, err := c.StartCCM(context.Background(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// createLBService creates a dual-stack LoadBalancer Service for the ccm to give addresses
// to, and returns it with them. Annotations, as key and value in turn, are added to the
// Service's.
func (c *cluster) createLBService(t testing.TB, name string, annotations ...string) (*corev1.Service, []netip.Addr) {
	t.Helper()
	return c.createLBServiceFor(t, name, nil, func(svc *corev1.Service) {
		for i := 0; i+1 < len(annotations); i += 2 {
			svc.Annotations[annotations[i]] = annotations[i+1]
		}
	})
}

// createLBServiceFor is createLBService with pods on the given nodes only (every node for
// none), and the Service changed by edit before it is created.
func (c *cluster) createLBServiceFor(t testing.TB, name string, nodes []*netns.Host, edit func(*corev1.Service)) (*corev1.Service, []netip.Addr) {
	t.Helper()
	ctx := context.Background()
	ns := c.namespace(t)
	c.serve(t, ns, name, nodes...)
	svc := lbServiceSpec(name, ns, corev1.IPv4Protocol, corev1.IPv6Protocol)
	edit(svc)
	svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if svc, err = c.Admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		addrs = addrs[:0]
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			addrs = append(addrs, netip.MustParseAddr(ing.IP))
		}
		return len(addrs) == 2 && svc.Annotations[annotation.Announcer] != "" && svc.Annotations[annotation.Standbys] != "", nil
	})
	if err != nil {
		t.Fatalf("Service %s/%s has no addresses and announcer: %v", ns, name, svc.Status.LoadBalancer.Ingress)
	}
	return svc, addrs
}

// lbServiceSpec returns a LoadBalancer Service of pool e2e for the pods of app name, of
// the families given: RequireDualStack with two.
func lbServiceSpec(name, namespace string, families ...corev1.IPFamily) *corev1.Service {
	policy := corev1.IPFamilyPolicySingleStack
	if len(families) > 1 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	svc := testbed.ServiceFor(namespace, name, name)
	svc.Annotations[annotation.Pool] = "e2e"
	svc.Spec.IPFamilyPolicy = ptr.To(policy)
	svc.Spec.IPFamilies = families
	return svc
}

// announcer returns the Service's announcer annotation now.
func (c *cluster) announcer(t testing.TB, svc *corev1.Service) string {
	t.Helper()
	return c.plan(t, svc)[0]
}

// plan returns the Service's announcer and standbys now; the announcer is "" for none.
func (c *cluster) plan(t testing.TB, svc *corev1.Service) []string {
	t.Helper()
	got, err := c.Admin.CoreV1().Services(svc.Namespace).Get(context.Background(), svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := annotation.Parse(got)
	return append([]string{r.Announcer}, r.Standbys...)
}

// startClient starts an open-loop client of addr in the client namespace: a request
// every 10 ms, each on a new connection with a 100 ms timeout.
func (c *cluster) startClient(addr netip.Addr) *traffic.Client {
	return traffic.Start(c.Net.Client.Dial, netip.AddrPortFrom(addr, servicePort), 10*time.Millisecond, requestTimeout)
}

// requestTimeout is how long the client's requests wait for their answer.
const requestTimeout = 100 * time.Millisecond

// waitSteady waits until the client's requests to addr all succeed at node for 300 ms.
func (c *cluster) waitSteady(t testing.TB, addr netip.Addr, node string) {
	t.Helper()
	if err := c.steady(addr, node, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// steady is waitSteady, giving up after within with an error.
func (c *cluster) steady(addr netip.Addr, node string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l := c.startClient(addr)
		time.Sleep(300 * time.Millisecond) // the window that must be all good
		reqs := l.Stop()
		if len(reqs) > 0 && !slices.ContainsFunc(reqs, func(r traffic.Request) bool { return !r.OK() || r.Node != node }) {
			return nil
		}
	}
	return fmt.Errorf("requests to %s do not all reach %s", addr, node)
}

// waitSettled waits until the ccm's status page shows it settled: it leads and has
// synced, every node's agent is up, and every Service's announcer is decided by it and
// written. It returns that status.
func (c *cluster) waitSettled(t testing.TB) *testbed.Status {
	t.Helper()
	st, err := c.WaitSettled(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitSwitched waits up to 5 s until the client's last traffic.RecoveryStreak requests
// were all sent after since and all answered by node: its traffic has moved there. If
// it never does, it stops the client and fails the test.
func waitSwitched(t testing.TB, l *traffic.Client, since time.Time, node string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		reqs := l.Requests()
		if n := len(reqs); n >= traffic.RecoveryStreak {
			last := reqs[n-traffic.RecoveryStreak:]
			if !last[0].Start.Before(since) && !slices.ContainsFunc(last, func(r traffic.Request) bool { return !r.OK() || r.Node != node }) {
				return
			}
		}
		if time.Now().After(deadline) {
			l.Stop()
			t.Fatalf("the client's requests do not all reach %s 5 s after %s", node, since.Format("15:04:05.000"))
		}
		time.Sleep(10 * time.Millisecond) // polls the client's record
	}
}

// straddles says that r failed because its connection was open when the client heard
// of a new announcer at switched: the client's next segment went to the new node, which
// knows nothing of the connection and resets it. No layer-2 move avoids that loss.
func straddles(r traffic.Request, switched time.Time) bool {
	const heard = 10 * time.Millisecond // from the announcer's log line to the client's neighbour entry
	return errors.Is(r.Err, syscall.ECONNRESET) && r.Start.After(switched.Add(-requestTimeout)) && r.Start.Before(switched.Add(heard))
}

// trial is one injected failure and what the client saw.
type trial struct {
	family   string
	from, to string
	injected time.Time
	outage   time.Duration
	stray    int
	// routed is the outage of a client behind the router, when the network has one.
	routed    time.Duration
	detected  time.Time // the ccm logged the agent down
	verdict   time.Time // the ccm logged the verdict that names it
	patched   time.Time // the ccm logged the announcer change
	announced time.Time // the new announcer's agent logged the announcement
	firstGood time.Time // the first request of the recovery streak
}

// killOwner takes the link of addr's announcing node down, measures the outage the
// client sees, and brings the link back up.
func (c *cluster) killOwner(t testing.TB, ccm *process.Process, svc *corev1.Service, addr netip.Addr) trial {
	t.Helper()
	tr, err := c.tryKillOwner(t, ccm, svc, addr)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// errUnsteady says that a trial failed nothing: addr's traffic did not settle on its
// announcer first.
var errUnsteady = errors.New("no steady traffic before the failure")

// tryKillOwner is killOwner, returning an error that wraps errUnsteady, instead of
// failing the test, when addr's requests do not all reach its announcer within 15 s
// before the failure: on a busy node a false failover can move the address meanwhile,
// and the caller may try again.
func (c *cluster) tryKillOwner(t testing.TB, ccm *process.Process, svc *corev1.Service, addr netip.Addr) (trial, error) {
	t.Helper()
	from := c.announcer(t, svc)
	if err := c.steady(addr, from, 15*time.Second); err != nil {
		return trial{}, fmt.Errorf("%w: %w", errUnsteady, err)
	}
	tr := trial{family: family(addr), from: from}
	clients := []*traffic.Client{c.startClient(addr)}
	if r := c.Net.RoutedClient; r != nil {
		clients = append(clients, traffic.Start(r.Dial, netip.AddrPortFrom(addr, servicePort), 10*time.Millisecond, requestTimeout))
	}
	// Paces the open-loop client: it runs at its full rate when the failure comes.
	time.Sleep(200 * time.Millisecond)
	offCycle()
	tr.injected = time.Now()
	if err := c.Node(from).SetLink(false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polls the clients' records
		if !slices.ContainsFunc(clients, func(l *traffic.Client) bool {
			_, _, ok := traffic.Outage(l.Requests(), tr.injected)
			return !ok
		}) {
			break
		}
	}
	// Recovered (or given up): a short window more, to count the stray losses that
	// follow a recovery.
	time.Sleep(300 * time.Millisecond)
	var ok bool
	if tr.outage, tr.stray, ok = traffic.Outage(clients[0].Stop(), tr.injected); !ok {
		t.Fatalf("%s: traffic did not recover within 10 s of %s going down", addr, from)
	}
	if len(clients) > 1 {
		reqs := clients[1].Stop()
		if tr.routed, _, ok = traffic.Outage(reqs, tr.injected); !ok {
			mac, state, _ := c.Net.Router.Neighbor(addr)
			t.Fatalf("%s: the routed client's traffic did not recover within 10 s of %s going down: %s; the router's entry: %s %s", addr, from, summary(reqs, tr.injected), mac, state)
		}
	}
	tr.firstGood = tr.injected.Add(tr.outage)
	tr.to = c.announcer(t, svc)
	if err := c.Node(from).SetLink(true); err != nil {
		t.Fatal(err)
	}
	tr.detected = logTime(ccm.Logs(), tr.injected, `"Agent state changed"`, `node="`+from+`"`, `state="down"`)
	tr.verdict = logTime(ccm.Logs(), tr.injected, `"Verdict changed"`, from)
	tr.patched = logTime(ccm.Logs(), tr.injected, `"Announcer changed"`, `from="`+from+`"`)
	tr.announced = logTime(c.Agent(tr.to).Logs(), tr.injected, `"Announcing address"`, `address="`+addr.String()+`"`)
	return tr, nil
}

// offCycle waits a random part of a probe interval (the default's, 100 ms) before a
// failure. The waits before one begin when a probe is answered (a node probed up again,
// the status page settled) and last whole intervals, so without it the failure would
// meet the dying node at the same point of its probe cycle in every trial, and the
// time to detect it would follow the phases of the nodes involved, not the product.
func offCycle() { time.Sleep(rand.N(100 * time.Millisecond)) }

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// logTime returns the time of the first klog line after since that contains every one of
// parts, or the zero time.
func logTime(logs string, since time.Time, parts ...string) time.Time {
	for line := range strings.Lines(logs) {
		if len(line) < 21 || !strings.ContainsAny(line[:1], "IWE") {
			continue
		}
		if !containsAll(line, parts) {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		at = at.AddDate(since.Year(), 0, 0)
		if !at.Before(since) {
			return at
		}
	}
	return time.Time{}
}

func TestFailover(t *testing.T) {
	c := newCluster(t, 3)
	// A client behind a router too: the router's neighbour entry must follow the address.
	if err := c.Net.AddRouter(); err != nil {
		t.Fatal(err)
	}
	ccm := c.startCCM(t)
	svc, addrs := c.createLBService(t, "failover")
	// Between trials, the node that came back must be probed up again, and the ccm done
	// with its decisions, before the next trial picks an announcer to kill.
	settle := func(t *testing.T) { c.waitSettled(t) }
	settle(t)

	for _, addr := range addrs {
		t.Run("node death "+family(addr), func(t *testing.T) {
			tr := c.killOwner(t, ccm, svc, addr)
			t.Logf("%s: %s died, %s took over; outage %v, behind the router %v (detected %v, patched %v, announced %v after)",
				addr, tr.from, tr.to, tr.outage, tr.routed, since(tr.detected, tr.injected), since(tr.patched, tr.injected), since(tr.announced, tr.injected))
			if tr.to == tr.from || tr.to == "" {
				t.Errorf("announcer after %s died: %q", tr.from, tr.to)
			}
			if tr.outage > time.Second || tr.routed > time.Second {
				t.Errorf("outage %v, behind the router %v; want well under a second", tr.outage, tr.routed)
			}
			// The router took the announcement: its entry names the new announcer.
			if mac, _, err := c.Net.Router.Neighbor(addr); err != nil || !bytes.Equal(mac, c.Node(tr.to).MAC) {
				t.Errorf("the router's neighbour entry of %s: %v (%v), want %s's MAC %s", addr, mac, err, tr.to, c.Node(tr.to).MAC)
			}
			settle(t)
		})
	}

	t.Run("agent killed", func(t *testing.T) {
		addr := addrs[0]
		from := c.announcer(t, svc)
		c.waitSteady(t, addr, from)
		l := c.startClient(addr)
		time.Sleep(100 * time.Millisecond) // paces the open-loop client, as in killOwner
		killed := time.Now()
		if err := c.Agent(from).Kill(); err != nil {
			t.Fatal(err)
		}
		var to string
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			to = c.announcer(t, svc)
			return to != from && to != "", nil
		})
		if err != nil {
			l.Stop()
			t.Fatalf("announcer %q 5 s after the agent of %s was killed", to, from)
		}
		// The node itself still takes traffic sent to its MAC: the outage is over when
		// the client's traffic reaches the new announcer.
		waitSwitched(t, l, killed, to)
		reqs := l.Stop()
		took, stray, ok := traffic.Outage(reqs, killed)
		t.Logf("agent of %s killed; %s took over, outage %v, %d stray losses", from, to, took, stray)
		if !ok || took > time.Second {
			t.Errorf("outage %v (recovered: %v), want well under a second", took, ok)
		}
		c.startAgent(t, c.Node(from))
		c.waitReady(t, c.Node(from))
		settle(t)
	})

	t.Run("agent drained", func(t *testing.T) {
		addr := addrs[0]
		from := c.announcer(t, svc)
		c.waitSteady(t, addr, from)
		l := c.startClient(addr)
		time.Sleep(100 * time.Millisecond) // paces the open-loop client, as in killOwner
		// SIGTERM: the agent says it is draining, the ccm moves its addresses away at once,
		// and the agent exits as soon as no Service names it, long before its grace period.
		start := time.Now()
		if err := c.Agent(from).Stop(10 * time.Second); err != nil {
			t.Errorf("drained agent exit: %v", err)
		}
		took := time.Since(start)
		// The agent exits once no Service names it, so the annotation has moved by now.
		to := c.announcer(t, svc)
		t.Logf("agent of %s drained in %v; %s took over", from, took, to)
		if to == from || to == "" {
			l.Stop()
			t.Fatalf("announcer %q after the agent of %s drained", to, from)
		}
		// No failure is only worth something once the client's traffic has moved to the
		// new announcer, past the drained agent: until then it may still go to from.
		waitSwitched(t, l, start, to)
		reqs := l.Stop()
		if took >= 2*time.Second {
			t.Errorf("the agent took %v to exit: it waited for its grace period instead of the ccm moving its addresses", took)
		}
		switched := logTime(c.Agent(to).Logs(), start, `"Announcing address"`, `address="`+addr.String()+`"`)
		for _, r := range reqs {
			switch {
			case r.OK():
			case straddles(r, switched):
				t.Logf("request at %s was in flight when %s announced the address at %s: %v", r.Start.Format("15:04:05.000"), to, switched.Format("15:04:05.000"), r.Err)
			default:
				t.Errorf("request at %s failed during a drain: %v", r.Start.Format("15:04:05.000"), r.Err)
			}
		}
		c.startAgent(t, c.Node(from))
		c.waitReady(t, c.Node(from))
		settle(t)
	})

	t.Run("ccm killed and restarted", func(t *testing.T) {
		addr := addrs[0]
		owner := c.announcer(t, svc)
		c.waitSteady(t, addr, owner)
		changes := c.countEvents(t, svc, "AnnouncerChanged")
		l := c.startClient(addr)
		killed := time.Now()
		if err := ccm.Kill(); err != nil {
			t.Fatal(err)
		}
		// No pause before the restart: the dead ccm's lease (3 s) keeps the new one
		// waiting, and that is the time without a ccm.
		ccm = c.startCCM(t)
		// Known state first: the new ccm leads, has probed every agent, and has decided
		// the Service's announcer itself (a decision on the page that is not pending).
		st, err := c.WaitStatus(context.Background(), 15*time.Second, func(st *testbed.Status) (bool, string) {
			if ok, why := st.Settled(c.NodeNames()); !ok {
				return false, why
			}
			s := st.Service(svc.Namespace, svc.Name)
			if s == nil {
				return false, "no " + svc.Name + " on the page"
			}
			return true, ""
		})
		if err != nil {
			l.Stop()
			t.Fatal(err)
		}
		led := logTime(ccm.Logs(), killed, `"Successfully acquired lease"`)
		s := st.Service(svc.Namespace, svc.Name)
		t.Logf("the new ccm led %v after the kill and settled %v after it; decided %s: %s", since(led, killed), time.Since(killed), s.Announcer, s.Why)
		if s.Announcer != owner {
			t.Errorf("the new ccm decided %s, want %s unchanged", s.Announcer, owner)
		}
		// The decision is known; a short window more, still under traffic, for what the
		// new leader does right after it (its first probes' verdicts are only a few
		// intervals old): five probe intervals.
		time.Sleep(500 * time.Millisecond)
		reqs := l.Stop()
		if failed := slices.IndexFunc(reqs, func(r traffic.Request) bool { return !r.OK() }); failed >= 0 {
			t.Errorf("request at %v failed while the ccm was away", reqs[failed].Start)
		}
		if got := c.announcer(t, svc); got != owner {
			t.Errorf("announcer %s after the ccm restarted, want %s unchanged", got, owner)
		}
		if got := c.countEvents(t, svc, "AnnouncerChanged"); got != changes {
			t.Errorf("%d AnnouncerChanged events after the restart, want %d", got, changes)
		}
		if led.IsZero() {
			t.Error("the restarted ccm never logged that it led")
		}
	})
	// Every takeover above had the previous announcer's last frames around it, and the
	// drained agent kept answering after the move: none of it is another host's claim.
	if n := c.countEvents(t, svc, servicewatch.ReasonDuplicateAddress); n != 0 {
		t.Errorf("%d DuplicateAddress events after the failovers, want none: a takeover taken for a conflict", n)
	}
}

// watchBroken reports whether a client-go program's log (at -v=2 or more) says, after
// since, that a watch of its broke: the stream cut off, the watch ended with an error, or
// it could not be started again. Which one depends on how the connection ended.
func watchBroken(logs string, since time.Time) bool {
	for _, msg := range []string{`"Unexpected EOF during watch stream event decoding"`, `"Warning: watch ended with error"`, `"Failed to watch"`} {
		if !logTime(logs, since, msg).IsZero() {
			return true
		}
	}
	return false
}

// containsAll reports whether s contains every one of parts.
func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func since(t, from time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(from)
}

// countEvents returns how many times events of reason were recorded on svc.
func (c *cluster) countEvents(t testing.TB, svc *corev1.Service, reason string) int {
	t.Helper()
	n, err := events.Count(context.Background(), c.Admin, svc.Namespace, svc.Name, reason)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAPIServerDown(t *testing.T) {
	netns.RequireRoot(t)
	// A control plane of its own, since this test stops it.
	cp := controlplane.StartForTest(t)
	c := newClusterOn(t, cp, 2)
	ccm := c.startCCM(t)
	svc, addrs := c.createLBService(t, "api-down")
	c.waitSettled(t)
	owner := c.announcer(t, svc)
	for _, addr := range addrs {
		c.waitSteady(t, addr, owner)
	}
	clients := []*traffic.Client{c.startClient(addrs[0]), c.startClient(addrs[1])}
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
	// The agents lose their watch and keep the last state: nothing is withdrawn. Known
	// state first: every agent has seen its watches break.
	for _, h := range c.Net.Nodes {
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return watchBroken(c.Agent(h.Label).Logs(), stopped), nil
		})
		if err != nil {
			stopClients()
			t.Fatalf("the agent of %s logged no broken watch 10 s after the API server stopped", h.Label)
		}
	}
	t.Logf("every agent's watch broke within %v of the API server stopping", time.Since(stopped).Round(time.Millisecond))
	// And the ccm has given up leading, as it must once it cannot renew its lease (2 s):
	// from then on nothing in the system acts, and the agents are on their own.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-ccm.Exited():
			return true, nil
		default:
			return !logTime(ccm.Logs(), stopped, `"Failed to renew lease"`).IsZero(), nil
		}
	})
	if err != nil {
		stopClients()
		t.Fatal("the ccm still leads 10 s after the API server stopped")
	}
	t.Logf("the ccm stopped leading %v after the API server stopped", time.Since(stopped).Round(time.Millisecond))
	// Then the client forgets the addresses' MACs, so that only an agent that still
	// announces them, without the API server, gets its traffic back.
	flushed := time.Now()
	if err := c.Net.Client.FlushNeighbors(); err != nil {
		stopClients()
		t.Fatal(err)
	}
	for _, l := range clients {
		waitSwitched(t, l, flushed, owner)
	}
	for i, l := range clients {
		reqs := l.Stop()
		failed := 0
		for _, r := range reqs {
			if !r.OK() || r.Node != owner {
				failed++
			}
		}
		t.Logf("%s: %d requests in the %v after the API server stopped, %d failed or elsewhere", addrs[i], len(reqs), time.Since(stopped).Round(time.Millisecond), failed)
		if failed > 0 {
			t.Errorf("%s: %d of %d requests failed or missed %s with the API server down", addrs[i], failed, len(reqs), owner)
		}
	}
	for _, f := range []string{"IPv4", "IPv6"} {
		if got := c.metric(t, c.Node(owner), `baremetal_agent_owned_addresses{family="`+f+`"}`); got != "1" {
			t.Errorf("%s owns %q %s addresses with the API server down, want 1", owner, got, f)
		}
	}
}

// percentile returns the p-th percentile of sorted, by the nearest-rank method.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summary says how a client's requests went before and after a failure: how many
// succeeded and failed, and the errors and nodes seen after it.
func summary(reqs []traffic.Request, failure time.Time) string {
	var before, after [2]int
	seen := map[string]int{}
	for _, r := range reqs {
		ok := 0
		if r.OK() {
			ok = 1
		}
		if r.Start.Before(failure) {
			before[ok]++
			continue
		}
		after[ok]++
		if r.OK() {
			seen["answered by "+r.Node]++
		} else {
			seen[r.Err.Error()]++
		}
	}
	return fmt.Sprintf("before: %d good, %d failed; after: %d good, %d failed %v", before[1], before[0], after[1], after[0], seen)
}
