package prober

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"

	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/testutil"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// fleet runs n agents on 127.0.0.2 and up, all on port, and a ccm's prober of them.
type fleet struct {
	t      *testing.T
	port   int
	p      *Prober
	client *fake.Clientset // of the Nodes
	stops  []func()
	mu     sync.Mutex
	downs  map[string]time.Time // when each node was last seen going down
	// seen are the agents' probing when each node was last seen going down.
	seen map[string]map[string]Agent
}

func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{t: t, port: agentPort(t), downs: map[string]time.Time{}, seen: map[string]map[string]Agent{}}
	var nodes []runtime.Object
	for i := range n {
		f.stops = append(f.stops, f.start(i))
		nodes = append(nodes, testNode(f.name(i), f.ip(i)))
	}
	f.p, _, f.client = startProberClient(t, config.Failover{ProbeInterval: 50 * time.Millisecond, FailureThreshold: 3, AgentPort: f.port}, func(*Prober) {}, nodes...)
	f.p.OnChange(func(node string) {
		if f.p.Health(node) == liveness.Down {
			seen := f.p.Agents()
			f.mu.Lock()
			f.downs[node], f.seen[node] = time.Now(), seen
			f.mu.Unlock()
		}
	})
	for i := range n {
		if got := f.p.Health(f.name(i)); got != liveness.Up {
			t.Fatalf("%s is %v at the start, want up", f.name(i), got)
		}
	}
	return f
}

func (f *fleet) name(i int) string { return fmt.Sprintf("node-%d", i) }
func (f *fleet) ip(i int) string   { return fmt.Sprintf("127.0.0.%d", i+2) }

func (f *fleet) start(i int) func() {
	return respond(f.t, f.name(i), f.ip(i)+":"+strconv.Itoa(f.port))
}

// stop stops the agents named, at once.
func (f *fleet) stop(agents ...int) {
	for _, i := range agents {
		f.stops[i]()
	}
}

// restart starts the agents named again, at once.
func (f *fleet) restart(agents ...int) {
	for _, i := range agents {
		f.stops[i] = f.start(i)
	}
}

func (f *fleet) downed() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range f.downs {
		out[k] = v
	}
	return out
}

// TestIsolationKeepsEveryAgent checks that agents lost together, more than half of
// them, are taken for this ccm's isolation: none goes down, and when they answer again
// nothing has changed.
func TestIsolationKeepsEveryAgent(t *testing.T) {
	f := newFleet(t, 6)
	var events []Isolation
	var mu sync.Mutex
	f.p.OnIsolation(func(v Isolation) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, v)
	})
	before, _ := testutil.GetCounterMetricValue(isolations)
	f.stop(0, 1, 2, 3, 4)
	eventually(t, 2*time.Second, "isolation", func() bool { return f.p.Isolation().Isolated })
	time.Sleep(300 * time.Millisecond) // six intervals: every lost agent far past its threshold
	if d := f.downed(); len(d) > 0 {
		t.Errorf("agents lost together went down: %v", d)
	}
	for i := range 6 {
		if got := f.p.Health(f.name(i)); got != liveness.Up {
			t.Errorf("%s is %v while the prober is isolated, want up as it was", f.name(i), got)
		}
	}
	if iso := f.p.Isolation(); len(iso.Lost) != 5 || iso.Probed != 6 {
		t.Errorf("isolation %+v, want 5 lost of 6", iso)
	}
	if after, _ := testutil.GetCounterMetricValue(isolations); after-before != 1 {
		t.Errorf("%v isolation episodes counted, want 1", after-before)
	}
	f.restart(0, 1, 2, 3, 4)
	eventually(t, time.Second, "the end of the isolation", func() bool { return !f.p.Isolation().Isolated })
	time.Sleep(200 * time.Millisecond)
	if d := f.downed(); len(d) > 0 {
		t.Errorf("agents went down after the isolation: %v", d)
	}
	if v := f.p.Verdict(); len(v.Down) > 0 {
		t.Errorf("verdict %v after an isolation, want no node down", v.Down)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || !events[0].Isolated || events[1].Isolated {
		t.Errorf("isolation listeners heard %+v, want its start and its end", events)
	}
}

// TestIsolationNeedsMoreThanOneLost checks the rule for small clusters: a single agent
// lost is never isolation, so one node of two, or the only one, fails over.
func TestIsolationNeedsMoreThanOneLost(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			f := newFleet(t, n)
			f.stop(0)
			eventually(t, time.Second, "node-0 down", func() bool { return f.p.Health("node-0") == liveness.Down })
			if f.p.Isolation().Isolated {
				t.Error("one agent lost taken for isolation")
			}
		})
	}
}

// TestIsolationEndsAndFailsOverTheDead checks that once most agents answer again, one
// that still does not goes down as usual after the thresholds.
func TestIsolationEndsAndFailsOverTheDead(t *testing.T) {
	f := newFleet(t, 6)
	f.stop(0, 1, 2, 3, 4)
	eventually(t, 2*time.Second, "isolation", func() bool { return f.p.Isolation().Isolated })
	f.restart(0, 1, 2, 3)
	eventually(t, 2*time.Second, "node-4 down", func() bool { _, ok := f.downed()["node-4"]; return ok })
	if f.p.Isolation().Isolated {
		t.Error("still isolated with 5 of 6 agents answering")
	}
	if d := f.downed(); len(d) != 1 {
		t.Errorf("went down: %v, want node-4 alone", d)
	}
	// And a death afterwards fails over as usual.
	f.stop(5)
	eventually(t, time.Second, "node-5 down", func() bool { return f.p.Health("node-5") == liveness.Down })
}

// TestCensusBeforeDown checks that an agent is taken for down only once enough other
// agents have answered a probe sent since the first one it missed, brought forward rather
// than waited for, that more than half of them cannot be lost: not an isolation.
func TestCensusBeforeDown(t *testing.T) {
	f := newFleet(t, 6)
	before, _ := testutil.GetCounterMetricValue(censuses)
	f.stop(0)
	stopped := time.Now()
	eventually(t, time.Second, "node-0 down", func() bool { return f.p.Health("node-0") == liveness.Down })
	down := f.downed()["node-0"]
	f.mu.Lock()
	seen := f.seen["node-0"]
	f.mu.Unlock()
	// The others' turns are spread over the interval, and without the census some would
	// come only after node-0's last miss.
	answered := 0
	for node, a := range seen {
		if node != "node-0" && a.LastAnswer.After(stopped) {
			answered++
		}
	}
	if isolatedBy(len(seen)-answered, len(seen), config.DefaultIsolationShare) {
		t.Errorf("node-0 judged when %d of the %d others had answered since it stopped: too few to rule out an isolation", answered, len(seen)-1)
	}
	if after, _ := testutil.GetCounterMetricValue(censuses); after <= before {
		t.Error("no census brought the other probes forward")
	}
	if took := down.Sub(stopped); took > 50*time.Millisecond+12*time.Millisecond+2*liveness.RapidInterval+20*time.Millisecond {
		t.Errorf("node-0 down %v after it stopped: the census added to the detection", took)
	}
	t.Logf("node-0 down %v after it stopped", down.Sub(stopped))
}
