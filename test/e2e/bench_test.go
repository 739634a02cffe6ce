package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// benchTrials is how many failures each case of BenchmarkFailover injects.
const benchTrials = 20

// row is one case of the failover table: the outages its trials measured, and where the
// time of the median trial went.
type row struct {
	name    string
	outages []time.Duration
	detail  string
}

// BenchmarkFailover injects benchTrials failures in each case, with the product's
// default failover settings, and prints one table of the outages an open-loop client saw
// (min, p50, p99, max), with the probe packets per agent and the API writes in steady
// state. Run it with -benchtime=1x (make bench-failover); a case alone with
// -bench=BenchmarkFailover/<case>.
func BenchmarkFailover(b *testing.B) {
	var rows []row
	var steady string
	b.Run("node-death", func(b *testing.B) {
		for b.Loop() {
			var r []row
			r, steady = benchNodeDeath(b)
			rows = append(rows, r...)
		}
	})
	b.Run("leader-death", func(b *testing.B) {
		for b.Loop() {
			rows = append(rows, benchLeaderDeath(b))
		}
	})
	b.Run("api-server-down", func(b *testing.B) {
		for b.Loop() {
			rows = append(rows, benchAPIServerDown(b))
		}
	})
	b.Run("5000-services", func(b *testing.B) {
		for b.Loop() {
			rows = append(rows, benchManyServices(b)...)
		}
	})
	printTable(os.Stdout, rows, steady)
}

// benchNodeDeath is today's case: the announcing node's link goes down, the ccm and the
// API server are fine. A second client sits behind a router, at the router's default
// neighbour settings, as most clients do. It also measures the steady state.
func benchNodeDeath(b *testing.B) ([]row, string) {
	c := newCluster(b, 3)
	if err := c.Net.AddRouter(); err != nil {
		b.Fatal(err)
	}
	ccm := c.startCCM(b)
	svc, addrs := c.createLBService(b, "bench")
	c.waitSettled(b)
	rate := c.probeRate(b, 5*time.Second)
	writes := c.apiWrites(b, 10*time.Second)
	steady := fmt.Sprintf("steady state: %.1f probe packets per second per agent (the busiest agent's answers), %d API writes in 10 s besides leader leases", rate, writes)
	var rows []row
	for _, addr := range addrs {
		var results []trial
		for range benchTrials {
			results = append(results, c.killOwner(b, ccm, svc, addr))
			c.waitSettled(b) // the returned node is probed up again
		}
		m := median(results)
		rows = append(rows, row{
			name:    "node death, " + family(addr),
			outages: durations(results),
			detail: fmt.Sprintf("median trial %s → %s: down after %.1f ms, verdict sent %.1f ms later, announced +%.1f ms, patch acknowledged +%.1f ms, first good request +%.1f ms",
				m.from, m.to, ms(since(m.detected, m.injected)), max(0, ms(since(m.verdict, m.detected))), ms(since(m.announced, m.detected)),
				ms(since(m.patched, m.detected)), ms(since(m.firstGood, m.announced))),
		})
		var routed []time.Duration
		for _, r := range results {
			routed = append(routed, r.routed)
		}
		slices.Sort(routed)
		rows = append(rows, row{
			name:    "node death, " + family(addr) + ", client behind a router",
			outages: routed,
			detail:  "the same trials, seen from a client on another subnet through a Linux router at its default neighbour settings",
		})
	}
	return rows, steady
}

// median returns the trial whose outage is the median's.
func median(results []trial) trial {
	p := percentile(durations(results), 50)
	return slices.MinFunc(results, func(x, y trial) int {
		return cmp.Compare((x.outage - p).Abs(), (y.outage - p).Abs())
	})
}

// measure waits until every client recovered from the failure at injected, or 10 s, then
// a little longer for stray losses, and returns each client's outage.
func measure(b *testing.B, clients []*traffic.Client, injected time.Time) []time.Duration {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polls the clients' records
		if !slices.ContainsFunc(clients, func(l *traffic.Client) bool {
			_, _, ok := traffic.Outage(l.Requests(), injected)
			return !ok
		}) {
			break
		}
	}
	time.Sleep(300 * time.Millisecond) // the stray losses that follow a recovery
	var out []time.Duration
	for _, l := range clients {
		took, _, ok := traffic.Outage(l.Stop(), injected)
		if !ok {
			b.Fatalf("traffic did not recover within 10 s of the failure at %s", injected.Format("15:04:05.000"))
		}
		out = append(out, took)
	}
	return out
}

// benchAPIServerDown kills the announcing node a second after the API server: the ccm
// still runs (with the manifests' leader election it keeps leading for 10 s without the
// API server), and its verdict is all the standby hears.
func benchAPIServerDown(b *testing.B) row {
	cp := controlplane.StartForTest(b)
	c := newClusterOn(b, cp, 3)
	ccm := c.startCCM(b, manifestsLease...)
	svc, addrs := c.createLBService(b, "bench-api")
	c.waitSettled(b)
	var outages []time.Duration
	for range benchTrials {
		owner := c.announcer(b, svc)
		c.waitSteady(b, addrs[0], owner)
		l := c.startClient(addrs[0])
		if err := cp.KillAPIServer(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // the API server stays away; the agents' watches break
		offCycle()
		injected := time.Now()
		if err := c.Node(owner).SetLink(false); err != nil {
			b.Fatal(err)
		}
		took := measure(b, []*traffic.Client{l}, injected)[0]
		outages = append(outages, took)
		if took > 300*time.Millisecond {
			// Where the time of a slow trial went: the ccm's judgement, then each
			// standby's verdict and announcement.
			var standbys []string
			for _, h := range c.Net.Nodes {
				if h.Label == owner {
					continue
				}
				logs := c.Agent(h.Label).Logs()
				standbys = append(standbys, fmt.Sprintf("%s took the verdict %v after it and announced %v after it", h.Label,
					since(logTime(logs, injected, `"Took the ccm's verdict"`, owner), injected),
					since(logTime(logs, injected, `"Announcing address"`, `address="`+addrs[0].String()+`"`), injected)))
			}
			b.Logf("a trial of %v: %s down %v after the failure, the verdict %v after it; %s", took, owner,
				since(logTime(ccm.Logs(), injected, `"Agent state changed"`, `node="`+owner+`"`, `state="down"`), injected),
				since(logTime(ccm.Logs(), injected, `"Verdict changed"`, owner), injected), strings.Join(standbys, "; "))
			// And what the standbys' views made of it, printed whole (a benchmark's log is
			// cut short).
			for _, h := range c.Net.Nodes {
				if h.Label != owner {
					fmt.Printf("%s's view around the trial:\n%s", h.Label, viewLines(c.Agent(h.Label).Logs(), injected.Add(-2*time.Second), injected.Add(took+100*time.Millisecond)))
				}
			}
		}
		if err := c.Node(owner).SetLink(true); err != nil {
			b.Fatal(err)
		}
		if err := cp.RestartAPIServer(context.Background()); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ccm.Exited():
			ccm = c.startCCM(b, manifestsLease...) // as a kubelet would
		default:
		}
		if _, err := c.WaitStatus(context.Background(), 60*time.Second, settledOn(c)); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(outages)
	return row{name: "node death, API server stopped 1 s before", outages: outages,
		detail: "the ccm's verdict reaches the standby on the probe channel; the annotation follows once the API server is back"}
}

// probeRate returns the probes per second an agent answers in steady state, the busiest
// agent's, measured over d from the agents' own counters.
func (c *cluster) probeRate(b *testing.B, d time.Duration) float64 {
	count := func() map[string]float64 {
		out := map[string]float64{}
		for _, h := range c.Net.Nodes {
			out[h.Label] = c.metricValue(b, h, `baremetal_agent_probes_total{outcome="answered"}`)
		}
		return out
	}
	before := count()
	time.Sleep(d) // the window the rate is measured over
	after := count()
	busiest := 0.0
	for n := range after {
		busiest = max(busiest, (after[n]-before[n])/d.Seconds())
	}
	return busiest
}

// apiWrites returns the API server's write requests over d, from its own metrics, leaving
// out leader leases.
func (c *cluster) apiWrites(b *testing.B, d time.Duration) int {
	count := func() int {
		body, err := c.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for line := range strings.Lines(string(body)) {
			if !strings.HasPrefix(line, "apiserver_request_total{") || strings.Contains(line, `resource="leases"`) {
				continue
			}
			if !slices.ContainsFunc([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, func(v string) bool { return strings.Contains(line, `verb="`+v+`"`) }) {
				continue
			}
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			n += int(v)
		}
		return n
	}
	before := count()
	time.Sleep(d) // the window the writes are counted over
	return count() - before
}

// printTable prints the failover table.
func printTable(w *os.File, rows []row, steady string) {
	fmt.Fprintf(w, "\nfailover, %d failures per case; n outages measured; outage seen by an open-loop client (1 request per 10 ms, 100 ms timeout), in ms\n", benchTrials)
	fmt.Fprintf(w, "%-50s %6s %8s %8s %8s %8s\n", "case", "n", "min", "p50", "p99", "max")
	for _, r := range rows {
		o := r.outages
		fmt.Fprintf(w, "%-50s %6d %8.1f %8.1f %8.1f %8.1f\n", r.name, len(o), ms(o[0]), ms(percentile(o, 50)), ms(percentile(o, 99)), ms(o[len(o)-1]))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %s: %s\n", r.name, r.detail)
	}
	if steady != "" {
		fmt.Fprintln(w, steady)
	}
}

func durations(results []trial) []time.Duration {
	var out []time.Duration
	for _, r := range results {
		out = append(out, r.outage)
	}
	slices.Sort(out)
	return out
}

// viewLines returns an agent's log lines from since until until that say how its view of
// what it announces came about.
func viewLines(logs string, since, until time.Time) string {
	var out strings.Builder
	for line := range strings.Lines(logs) {
		if !slices.ContainsFunc([]string{"Own view", "Service watch", "Announcing", "Withdrawing", "Took the ccm", "duty", "Standing in"}, func(s string) bool { return strings.Contains(line, s) }) {
			continue
		}
		if at := logTime(line, since); !at.IsZero() && at.Before(until) {
			out.WriteString(line)
		}
	}
	return out.String()
}
