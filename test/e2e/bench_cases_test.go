package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// settledOn is Status.Settled over the cluster's nodes, for WaitStatus.
func settledOn(c *cluster) func(*testbed.Status) (bool, string) {
	nodes := c.NodeNames()
	return func(st *testbed.Status) (bool, string) { return st.Settled(nodes) }
}

// setPreferred makes node the Service's preferred node, so that it announces it.
func (c *cluster) setPreferred(b testing.TB, svc *corev1.Service, node string) {
	b.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotation.PreferredNodes, node)
	if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
}

// benchLeaderDeath runs two ccm replicas in node namespaces with the manifests' leader
// election and kills, each trial, the node of the leader, which announces the Service:
// the agents take over while no ccm is heard.
func benchLeaderDeath(b *testing.B) row {
	c := newCluster(b, 3)
	ccms := map[string]*process.Process{}
	for _, h := range c.Net.Nodes[:2] {
		p, err := c.StartCCMOn(context.Background(), h, manifestsLease...)
		if err != nil {
			b.Fatal(err)
		}
		ccms[h.Label] = p
	}
	svc, addrs := c.createLBService(b, "bench-leader")
	var outages []time.Duration
	for range benchTrials {
		leader := ""
		for node, p := range ccms {
			if !logTime(p.Logs(), time.Time{}, `"Successfully acquired lease"`).IsZero() {
				leader = node // a replica leads until it dies, and each trial kills the leader
			}
		}
		if leader == "" {
			leader = c.Net.Nodes[0].Label
			waitLeads(b, ccms[leader], time.Time{}, 60*time.Second)
		}
		c.setPreferred(b, svc, leader)
		c.waitAnnouncer(b, svc, leader, 30*time.Second)
		if _, err := c.WaitStatus(context.Background(), 60*time.Second, settledOn(c)); err != nil {
			b.Fatal(err)
		}
		c.waitSteady(b, addrs[0], leader)
		l := c.startClient(addrs[0])
		time.Sleep(200 * time.Millisecond) // paces the open-loop client
		offCycle()
		injected := time.Now()
		h := c.Node(leader)
		if err := h.SetLink(false); err != nil {
			b.Fatal(err)
		}
		if err := ccms[leader].Kill(); err != nil {
			b.Fatal(err)
		}
		outages = append(outages, measure(b, []*traffic.Client{l}, injected)...)
		if err := h.SetLink(true); err != nil {
			b.Fatal(err)
		}
		// As a kubelet would, the node's replica starts again, as a standby now.
		p, err := c.StartCCMOn(context.Background(), h, manifestsLease...)
		if err != nil {
			b.Fatal(err)
		}
		ccms[leader] = p
		// A replica leads once the dead leader's lease has run out: either one.
		deadline := time.Now().Add(60 * time.Second)
		for !slices.ContainsFunc(slices.Collect(maps.Values(ccms)), func(p *process.Process) bool {
			return !logTime(p.Logs(), injected, `"Successfully acquired lease"`).IsZero()
		}) {
			if time.Now().After(deadline) {
				b.Fatalf("no ccm leads 60 s after %s", injected.Format("15:04:05.000"))
			}
			time.Sleep(100 * time.Millisecond) // polls the replicas' logs
		}
	}
	slices.Sort(outages)
	return row{name: "node death taking the ccm leader along", outages: outages,
		detail: "two ccm replicas in node namespaces, lease 15 s; the first standby checks the dead announcer itself once no ccm is heard for 150 ms"}
}

// bulkServices is how many Services the scale case gives one node.
var bulkServices = 5000

// bulkConfig has a pool large enough for bulkServices, announced on eth0 though it is
// not the nodes' subnet: the client routes it there.
const bulkConfig = `
pools:
- name: bulk
  addresses: [198.18.32.0/19]
  interfaces: [eth0]
`

// benchManyServices gives one node bulkServices Services and kills it: the time until a
// sample of addresses answers again, from the client, and until the standbys' agents
// answer for all of them, from their metrics.
func benchManyServices(b *testing.B) []row {
	if n, err := strconv.Atoi(os.Getenv("BENCH_BULK_SERVICES")); err == nil {
		bulkServices = n // a smaller run, to look into the case
	}
	// Each trial moves every Service twice, about a minute at 5,000: 5 of them, unless
	// BENCH_BULK_TRIALS says otherwise.
	trials := 5
	if n, err := strconv.Atoi(os.Getenv("BENCH_BULK_TRIALS")); err == nil {
		trials = n
	}
	c := newClusterWith(b, controlplane.Shared(b), 3, bulkConfig)
	x := c.Net.Nodes[0]
	if _, err := c.Net.Client.Run(context.Background(), "ip", "route", "add", "198.18.32.0/19", "dev", c.Net.Client.Interface); err != nil {
		b.Fatal(err)
	}
	ccm := c.startCCM(b)
	created := time.Now()
	sample := c.createBulk(b, x.Label)
	if _, err := c.WaitStatus(context.Background(), 10*time.Minute, settledOn(c)); err != nil {
		b.Fatal(err)
	}
	// A live node taken for down while the Services were created (the machine saturated)
	// has them back only once its agent's cache has seen them moved away: settled before
	// that, the ccm is right, and x is not announcing yet. Each trial fails x, so it starts
	// once x answers for every address, as after a trial.
	c.waitOwned(b, c.Net.Nodes[:1], bulkServices, created)
	b.Logf("%d Services created and settled on %s in %v", bulkServices, x.Label, time.Since(created).Round(time.Second))
	var samples, all []time.Duration
	for range trials {
		// A trial starts from the steady state: a live node the ccm took for down while
		// the last moves saturated the machine must be back in every agent's verdict.
		c.waitNoneDown(b)
		var clients []*traffic.Client
		for _, a := range sample {
			c.waitSteady(b, a, x.Label)
			clients = append(clients, c.startClient(a))
		}
		time.Sleep(200 * time.Millisecond) // paces the open-loop clients
		offCycle()
		injected := time.Now()
		if err := x.SetLink(false); err != nil {
			b.Fatal(err)
		}
		took := c.waitOwned(b, c.Net.Nodes[1:], bulkServices, injected)
		all = append(all, took)
		if took > time.Second {
			// Where the time went: the verdict, and the standbys taking it.
			b.Logf("all %d addresses answered %v after the death: verdict sent %v after it, taken by %s %v and %s %v after it", bulkServices, took,
				since(logTime(ccm.Logs(), injected, `"Verdict changed"`, x.Label), injected),
				c.Net.Nodes[1].Label, since(logTime(c.Agent(c.Net.Nodes[1].Label).Logs(), injected, `"Took the ccm's verdict"`, x.Label), injected),
				c.Net.Nodes[2].Label, since(logTime(c.Agent(c.Net.Nodes[2].Label).Logs(), injected, `"Took the ccm's verdict"`, x.Label), injected))
		}
		samples = append(samples, measure(b, clients, injected)...)
		if err := x.SetLink(true); err != nil {
			b.Fatal(err)
		}
		// The preferred node comes back and takes its Services back; the next trial
		// starts when that is written and answered.
		if _, err := c.WaitStatus(context.Background(), 2*time.Minute, settledOn(c)); err != nil {
			b.Fatal(err)
		}
		c.waitOwned(b, c.Net.Nodes[:1], bulkServices, time.Now())
	}
	slices.Sort(samples)
	slices.Sort(all)
	falseDowns := countLines(ccm.Logs(), `"Agent state changed"`, `state="down"`) - trials
	return []row{
		{name: fmt.Sprintf("node announcing %d Services dies, client sample", bulkServices), outages: samples,
			detail: fmt.Sprintf("%d sampled addresses per trial; %d live agents taken for down during the case", len(sample), falseDowns)},
		{name: fmt.Sprintf("node announcing %d Services dies, all addresses", bulkServices), outages: all,
			detail: "until the standbys' agents answer ARP for every address (their baremetal_agent_owned_addresses)"},
	}
}

// createBulk creates bulkServices IPv4 Services that prefer node, all for one pod on each
// node, and returns the addresses of a sample of them.
func (c *cluster) createBulk(b *testing.B, node string) []netip.Addr {
	cfg := rest.CopyConfig(c.ControlPlane.AdminConfig())
	cfg.QPS, cfg.Burst = 2000, 2000
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bulk-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c.serve(b, ns.Name, "bulk")
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(bulkServices); i = next.Add(1) {
				svc := testbed.ServiceFor(ns.Name, fmt.Sprintf("bulk-%d", i), "bulk")
				svc.Annotations[annotation.PreferredNodes] = node
				if _, err := client.CoreV1().Services(ns.Name).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	var sample []netip.Addr
	for i := 1; i <= bulkServices; i += bulkServices / 5 {
		for {
			svc, err := client.CoreV1().Services(ns.Name).Get(ctx, fmt.Sprintf("bulk-%d", i), metav1.GetOptions{})
			if err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
				sample = append(sample, netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP))
				break
			}
			time.Sleep(time.Second) // allocation of thousands takes a while
		}
	}
	// The EndpointSlice controller writes a slice for each Service, at its client's rate:
	// kube-proxy drops what comes for a Service without one (Local, no local endpoint).
	deadline := time.Now().Add(10 * time.Minute)
	for {
		list, err := client.DiscoveryV1().EndpointSlices(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		served := map[string]bool{}
		for _, s := range list.Items {
			ready := 0
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
			if ready == len(c.Net.Nodes) {
				served[s.Labels[discoveryv1.LabelServiceName]] = true
			}
		}
		if len(served) == bulkServices {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d Services have an endpoint on every node 10 minutes after they were created", len(served), bulkServices)
		}
		time.Sleep(2 * time.Second) // a list of thousands of slices
	}
	return sample
}

// waitNoneDown waits up to 5 minutes until no agent takes any node for down: the ccm's
// verdict is empty, and every agent holds it.
func (c *cluster) waitNoneDown(b *testing.B) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		down := 0.0
		for _, h := range c.Net.Nodes {
			down += c.metricValue(b, h, "baremetal_agent_down_nodes")
		}
		if down == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the agents still take %v nodes for down 5 minutes on", down)
		}
		time.Sleep(100 * time.Millisecond) // polls the agents' metrics
	}
}

// countLines returns how many lines of logs contain every one of parts.
func countLines(logs string, parts ...string) int {
	n := 0
	for line := range strings.Lines(logs) {
		if containsAll(line, parts) {
			n++
		}
	}
	return n
}

// waitOwned waits up to 5 minutes until the agents of nodes answer for n IPv4 addresses
// between them, and returns the time since since. Moving thousands of Services takes a
// minute or more on 2 cores.
func (c *cluster) waitOwned(b *testing.B, nodes []*netns.Host, n int, since time.Time) time.Duration {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		total := 0.0
		for _, h := range nodes {
			total += c.metricValue(b, h, `baremetal_agent_owned_addresses{family="IPv4"}`)
		}
		if int(total) >= n {
			return time.Since(since)
		}
		time.Sleep(5 * time.Millisecond) // polls the agents' metrics
	}
	b.Fatalf("the agents do not answer for %d addresses within 5 minutes (counting from %s)", n, since.Format("15:04:05.000"))
	return 0
}
