package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// The benchmark runs the simulated agents, and a process that keeps a core busy, as this
// test binary run again with benchRole set: the prober's own CPU is then measured alone.
const (
	benchRole   = "PROBER_BENCH_ROLE"
	benchNetns  = "PROBER_BENCH_NETNS"
	benchAgents = 5000
	// benchPlanned is how many of the agents a plan names (PROBER_BENCH_PLANNED): one in
	// five, as many as the plans of 333 Services, three nodes each, name at most.
	benchPlanned = 1000
	netnsName    = "baremetal-prober-bench"
)

func TestMain(m *testing.M) {
	switch os.Getenv(benchRole) {
	case "agents":
		n, _ := strconv.Atoi(os.Getenv("PROBER_BENCH_N"))
		port, _ := strconv.Atoi(os.Getenv("PROBER_BENCH_PORT"))
		if prof := os.Getenv("PROBER_BENCH_AGENTS_CPUPROFILE"); prof != "" {
			// Where the simulated agents' own time goes: stopped when their input ends.
			if f, err := os.Create(prof); err == nil {
				_ = pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
		}
		code := serveAgents(n, port)
		pprof.StopCPUProfile()
		os.Exit(code)
	case "spin":
		for { //nolint:staticcheck // SA5002: keeping a core busy is the point (spin)
		}
	}
	os.Exit(m.Run())
}

// BenchmarkProber probes 5,000 simulated agents every 100 ms (the defaults) and reports
// the prober's CPU, alone and with the other core kept busy, the agents it took for down
// though they answered (false downs), the time from stopping an agent to its Down, and,
// in a network namespace, what an isolation does. As root it runs itself again in a
// network namespace of its own, so that only loopback addresses there see traffic.
func BenchmarkProber(b *testing.B) {
	if os.Getenv(benchNetns) == "" && os.Geteuid() == 0 {
		inNetns(b)
		return
	}
	benchProber(b)
}

// inNetns runs the benchmark again in a network namespace it creates, and removes it,
// also one left by a run that failed.
func inNetns(b *testing.B) {
	ip := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", netnsName).Run()
	ip("netns", "add", netnsName)
	defer func() { _ = exec.Command("ip", "netns", "del", netnsName).Run() }() // else the next run does, above
	ip("-n", netnsName, "link", "set", "lo", "up")
	args := []string{"netns", "exec", netnsName, os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkProber$", "-test.benchtime=1x", "-test.v"}
	if prof := os.Getenv("PROBER_BENCH_CPUPROFILE"); prof != "" {
		args = append(args, "-test.cpuprofile="+prof)
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), benchNetns+"="+netnsName)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("the benchmark in network namespace %s: %v", netnsName, err)
	}
	b.Log("the figures are those of the run in the network namespace, above")
}

type down struct {
	node string
	at   time.Time
}

func benchProber(b *testing.B) {
	port := 7474
	if os.Getenv(benchNetns) == "" {
		port = 17474 // the host's loopback: keep clear of an agent that may run there
	}
	n := benchAgents
	if v, err := strconv.Atoi(os.Getenv("PROBER_BENCH_AGENTS")); err == nil {
		n = v // fewer, to see where a slow machine stands
	}
	b.Cleanup(func() { b.Logf("%d datagrams dropped for want of buffer in all", udpDrops()) })
	sim := startAgents(b, n, port)
	nodes := make([]runtime.Object, n)
	for i := range n {
		nodes[i] = testNode(fmt.Sprintf("node-%d", i), benchAddr(i))
	}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(nodes...), 0)
	cfg := config.Failover{ProbeInterval: 100 * time.Millisecond, FailureThreshold: 3, AgentPort: port, IsolationShare: config.DefaultIsolationShare}
	if os.Getenv(benchNetns) != "" {
		// A stopped agent stands for a dead node, whose kernel answers no echo either; in
		// a namespace of its own the kernel can be told to answer none, and the agents
		// then get the product's time for busy ones: an answer that comes late, as the one
		// process of 5,000 agents gives after a burst, is a sign of life, not a miss.
		if err := os.WriteFile("/proc/sys/net/ipv4/icmp_echo_ignore_all", []byte("1"), 0); err != nil {
			b.Fatal(err)
		}
		cfg.BusyTimeout = config.DefaultBusyTimeout
	}
	p := New(cfg, testKey, testSigner, factory.Core().V1().Nodes())
	// Every node counts as named in a plan until the plans are set, below.
	plans := &plans{}
	p.SetDuties(plans)
	planned := min(benchPlanned, n)
	if v, err := strconv.Atoi(os.Getenv("PROBER_BENCH_PLANNED")); err == nil && v >= 0 {
		planned = min(v, n)
	}
	// The first planned nodes are named in a plan, the others idle; at the end, every one.
	var named, all []string
	for i := range n {
		all = append(all, fmt.Sprintf("node-%d", i))
	}
	named = all[:planned]
	plans.set(1, named...)
	// A listener must not block the prober: room for many downs, and the rest counted.
	downs := make(chan down, 20*n)
	var overflow atomic.Int64
	p.OnChange(func(node string) {
		if p.Health(node) == liveness.Down {
			select {
			case downs <- down{node, time.Now()}:
			default:
				overflow.Add(1)
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go p.Run(ctx)
	syncCtx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	if !cache.WaitForCacheSync(syncCtx.Done(), p.HasSynced) {
		b.Fatal("the prober never synced")
	}
	time.Sleep(2 * time.Second)
	b.ResetTimer()

	// CPU alone, then with the other core kept busy.
	type usage struct{ cores, user, system, rate float64 }
	measure := func(d time.Duration) usage {
		user, system := cpuTime()
		sent, start := counter(probesSent), time.Now()
		simCPU := procCPU(sim.cmd.Process.Pid)
		time.Sleep(d)
		wall := time.Since(start)
		b.Logf("over %v: the simulated agents' process used %.3f cores",
			wall.Round(time.Millisecond), float64(procCPU(sim.cmd.Process.Pid)-simCPU)/float64(wall))
		user2, system2 := cpuTime()
		u := usage{user: float64(user2-user) / float64(wall), system: float64(system2-system) / float64(wall)}
		u.cores, u.rate = u.user+u.system, (counter(probesSent)-sent)/wall.Seconds()
		return u
	}
	// collapsed logs, once, what the simulated agents took and what the sockets dropped.
	var once sync.Once
	collapsed := func() {
		once.Do(func() {
			b.Logf("simulated agents: %s", sim.statistics())
			b.Logf("sockets (/proc/net/udp, udp6):\n%s", udpSockets())
			b.Logf("prober: %.0f probes sent, %.0f verdicts sent, %.0f censuses, %.0f late answers, %d dropped for want of buffer",
				counter(probesSent), counter(verdictsSent), counter(censuses), counter(lateAnswers), udpDrops())
		})
	}
	waitIdle := func(want int) {
		deadline := time.Now().Add(5 * probe.Gap(cfg.ProbeInterval, true))
		for gauge(idleAgents) != float64(want) {
			if time.Now().After(deadline) {
				// What the prober's goroutines wait for, to tell a reader stuck from
				// answers that never come.
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				collapsed()
				b.Fatalf("%v agents idle, want %d", gauge(idleAgents), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
	}
	waitIdle(n - planned)
	alone := measure(10 * time.Second)
	b.Logf("simulated agents: %s", sim.statistics())
	stopSpin := spin(b)
	busy := measure(10 * time.Second)
	stopSpin()
	falseDowns := len(downs) + int(overflow.Load())
	for range falseDowns {
		b.Logf("false down: %v", <-downs)
	}

	b.Logf("%d of %d agents named in a plan, the others idle: prober CPU %.3f cores (%.3f user, %.3f system) at %.0f probes/s (%.1f µs a probe); with the other core busy %.3f cores at %.0f probes/s; %d false downs",
		planned, n, alone.cores, alone.user, alone.system, alone.rate, alone.cores/alone.rate*1e6, busy.cores, busy.rate, falseDowns)
	b.ReportMetric(alone.cores, "cores")
	b.ReportMetric(alone.user, "cores-user")
	b.ReportMetric(alone.system, "cores-system")
	b.ReportMetric(alone.rate, "probes/s")
	b.ReportMetric(busy.cores, "cores-other-core-busy")
	b.ReportMetric(busy.rate, "probes/s-other-core-busy")
	b.ReportMetric(float64(falseDowns), "false-downs")

	// Detection: stop agents one at a time, at random phases. Another agent going down
	// meanwhile is a false down too.
	var took []time.Duration
	for k := range 40 {
		i := (17 + 241*k) % max(planned, 1) // an agent named in a plan, probed at the full rate
		time.Sleep(time.Duration(rand.N(100)) * time.Millisecond)
		census, drops := counter(censuses), udpDrops()
		stopped := sim.stop(b, i)
		timeout := time.After(2 * time.Second)
	wait:
		for {
			select {
			case d := <-downs:
				if d.node != fmt.Sprintf("node-%d", i) {
					falseDowns++
					continue
				}
				took = append(took, d.at.Sub(stopped))
				// What a slow detection went through: the censuses it took, the datagrams
				// the namespace's sockets dropped meanwhile.
				b.Logf("node-%d down %v after its agent stopped; %.0f censuses, %d datagrams dropped for want of buffer",
					i, d.at.Sub(stopped).Round(time.Millisecond), counter(censuses)-census, udpDrops()-drops)
				break wait
			case <-timeout:
				b.Errorf("node-%d not down 2s after its agent stopped", i)
				collapsed()
				break wait
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(took) == 0 {
		b.Fatal("no stopped agent went down")
	}
	slices.Sort(took)
	b.ReportMetric(float64(falseDowns), "false-downs-with-kills")
	b.ReportMetric(ms(took[len(took)/2]), "detect-p50-ms")
	b.ReportMetric(ms(took[len(took)*99/100]), "detect-p99-ms")
	// Each stall gave the probes out a timeout more, which a detection may have waited.
	b.ReportMetric(counter(proberStalls), "prober-stalls")
	b.Logf("detection of %d stopped agents: min %v, p50 %v, p99 %v, max %v", len(took), took[0], took[len(took)/2], took[len(took)*99/100], took[len(took)-1])

	if os.Getenv(benchNetns) != "" {
		benchIsolation(b, p, downs, port)
	}

	// Every agent at the full rate, as when a plan names every node.
	plans.set(2, all...)
	waitIdle(0)
	for len(downs) > 0 {
		<-downs
	}
	full := measure(10 * time.Second)
	fullDowns := len(downs)
	b.Logf("every agent at the full rate: prober CPU %.3f cores (%.3f user, %.3f system) at %.0f probes/s (%.1f µs a probe); %d false downs",
		full.cores, full.user, full.system, full.rate, full.cores/full.rate*1e6, fullDowns)
	b.ReportMetric(full.cores, "cores-all-planned")
	b.ReportMetric(full.rate, "probes/s-all-planned")
	b.ReportMetric(float64(fullDowns), "false-downs-all-planned")
}

// benchIsolation cuts this namespace's probes off (a routing rule that refuses UDP to
// the agents' port, as a firewall on the ccm's host would) and checks that no agent goes
// down, then that the isolation ends when the rule is removed.
func benchIsolation(b *testing.B, p *Prober, downs chan down, port int) {
	ip := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// The local table comes first; move it after the rule that cuts the probes off.
	ip("rule", "add", "pref", "100", "lookup", "local")
	ip("rule", "del", "pref", "0")
	ip("rule", "add", "pref", "10", "to", "127.1.0.0/16", "ipproto", "udp", "dport", strconv.Itoa(port), "prohibit")
	cut := time.Now()
	time.Sleep(2 * time.Second)
	iso := p.Isolation()
	ip("rule", "del", "pref", "10")
	restored := time.Now()
	for p.Isolation().Isolated && time.Since(restored) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	over := time.Since(restored)
	time.Sleep(time.Second)
	isolatedDowns := len(downs)
	for range isolatedDowns {
		b.Logf("down in or after the isolation: %v", <-downs)
	}
	if !iso.Isolated {
		b.Errorf("not isolated 2s after the probes were cut off: %+v", iso)
	}
	b.ReportMetric(float64(len(iso.Lost)), "isolation-lost")
	b.ReportMetric(float64(isolatedDowns), "isolation-downs")
	b.ReportMetric(ms(over), "isolation-end-ms")
	b.Logf("probes cut off for %v: isolated within %v with %d of %d lost; over %v after they were restored; %d agents down",
		restored.Sub(cut), iso.Since.Sub(cut), len(iso.Lost), iso.Probed, over, isolatedDowns)
}

// udpDrops returns the UDP datagrams this network namespace's sockets dropped for want
// of receive buffer (RcvbufErrors).
func udpDrops() int {
	snmp, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for l := range strings.Lines(string(snmp)) {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for k, name := range names {
			if name == "RcvbufErrors" && k < len(f) {
				n, _ := strconv.Atoi(f[k])
				return n
			}
		}
	}
	return 0
}

// udpSockets returns this network namespace's UDP sockets as the kernel lists them: each
// with its receive queue and the datagrams it dropped. The prober's are dual-stack, in
// the IPv6 list.
func udpSockets() string {
	v4, _ := os.ReadFile("/proc/net/udp")
	v6, _ := os.ReadFile("/proc/net/udp6")
	return string(v4) + string(v6)
}

func gauge(g metrics.GaugeMetric) float64 {
	v, _ := testutil.GetGaugeMetricValue(g)
	return v
}

func counter(c metrics.CounterMetric) float64 {
	v, _ := testutil.GetCounterMetricValue(c)
	return v
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
