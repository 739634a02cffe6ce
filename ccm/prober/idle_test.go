package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// plans is a duty tracker that knows only which nodes a plan names.
type plans struct{ p atomic.Pointer[Planned] }

func (d *plans) Planned() *Planned                              { return d.p.Load() }
func (d *plans) Duty(string) (probe.Digest, bool)               { return 0, false }
func (d *plans) List(string) ([]netip.Addr, probe.Digest, bool) { return nil, 0, false }

func (d *plans) set(version uint64, nodes ...string) {
	set := map[string]bool{}
	for _, n := range nodes {
		set[n] = true
	}
	d.p.Store(&Planned{Nodes: set, Version: version})
}

// TestIdleAgents checks that the ccm probes the agents no plan names IdleFactor intervals
// apart, each of those real responders still hearing it, and the others at the full rate;
// that an idle agent a plan comes to name is probed at the full rate within an interval;
// and that an idle agent that dies is taken for down within an idle interval and the
// usual misses.
func TestIdleAgents(t *testing.T) {
	port := agentPort(t)
	var nodes []runtime.Object
	responders := map[string]*responder.Responder{}
	stops := map[string]func(){}
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		ip := "127.0.0." + strconv.Itoa(i+2)
		nodes = append(nodes, testNode(name, ip))
		responders[name], stops[name] = startResponder(t, name, ip+":"+strconv.Itoa(port))
	}
	cfg := config.Failover{ProbeInterval: testInterval, FailureThreshold: 3, AgentPort: port, IsolationShare: config.DefaultIsolationShare}
	d := &plans{}
	d.set(1, "node-a")
	p, changes := startProberSetUp(t, cfg, func(p *Prober) { p.SetDuties(d) }, nodes...)
	idleGap := probe.Gap(testInterval, true)
	eventually(t, 2*idleGap, "node-b and node-c idle", func() bool {
		return responders["node-b"].SilentAfter() == probe.SilentAfter(idleGap) && responders["node-c"].SilentAfter() == probe.SilentAfter(idleGap)
	})
	if got := responders["node-a"].SilentAfter(); got != probe.SilentAfter(testInterval) {
		t.Errorf("node-a, named in a plan, is told to expect the ccm's next request within %v, want %v", got, probe.SilentAfter(testInterval))
	}

	// The rates, over three idle intervals.
	rate := func(window time.Duration) map[string]float64 {
		before := map[string]uint64{}
		for n, r := range responders {
			before[n] = r.Stats().Requests
		}
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) {
			for n, r := range responders {
				// Each agent hears the ccm all along: it never takes it for silent.
				if since := time.Since(r.LastCCM()); since > r.SilentAfter() {
					t.Fatalf("%s last heard the ccm %v ago, past its bound of %v", n, since, r.SilentAfter())
				}
			}
			time.Sleep(testInterval / 4)
		}
		out := map[string]float64{}
		for n, r := range responders {
			out[n] = float64(r.Stats().Requests-before[n]) / window.Seconds()
		}
		return out
	}
	window := 3 * idleGap
	got := rate(window)
	t.Logf("requests a second over %v: %v", window, got)
	full, idle := 1/testInterval.Seconds(), 1/idleGap.Seconds()
	if got["node-a"] < 0.8*full {
		t.Errorf("node-a, named in a plan, probed %.1f times a second, want about %.0f", got["node-a"], full)
	}
	for _, n := range []string{"node-b", "node-c"} {
		if got[n] > 2*idle {
			t.Errorf("%s, named in no plan, probed %.1f times a second, want about %.0f", n, got[n], idle)
		}
	}

	// A plan names node-b: at the full rate within an interval.
	named := time.Now()
	d.set(2, "node-a", "node-b")
	eventually(t, idleGap, "node-b at the full rate", func() bool {
		return responders["node-b"].SilentAfter() == probe.SilentAfter(testInterval)
	})
	if took := time.Since(named); took > 3*testInterval {
		t.Errorf("node-b, just named in a plan, at the full rate after %v, want within an interval or so", took)
	}

	// node-c, idle, dies.
	drain(changes)
	stops["node-c"]()
	died := time.Now()
	waitState(t, p, changes, "node-c", liveness.Down, idleGap+time.Second)
	t.Logf("node-c, idle, down %v after its agent stopped", time.Since(died))
	if got := p.Health("node-b"); got != liveness.Up {
		t.Errorf("node-b %v, want up", got)
	}
}
