package e2e

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/cpu"
)

// busyBenchWindow is how long each case of BenchmarkBusyNode keeps the announcer's node
// busy before its node deaths: 6,000 probes of the busy agent, enough for a detector that
// errs once an hour to show it. BAREMETAL_BUSY_MINUTES overrides it for a quick run.
const busyBenchWindow = 10 * time.Minute

// busyMinutesEnv names the variable that overrides busyBenchWindow, in minutes.
const busyMinutesEnv = "BAREMETAL_BUSY_MINUTES"

// busyRow is one case of the busy-node table.
type busyRow struct {
	name       string
	pressure   pressure
	trialDowns int             // live agents taken for down during the deaths
	detections []time.Duration // of the deaths that the ccm logged, sorted
	outages    []time.Duration // sorted
	trials     int
	restarts   int // deaths put off because the node was taken for down first
}

// BenchmarkBusyNode runs each of busyCases for busyBenchWindow of pressure, counting what
// goes wrong while no node dies, then kills the busy announcer benchTrials times under the
// same pressure, and prints one table. Run it with -benchtime=1x (make bench-busy).
func BenchmarkBusyNode(b *testing.B) {
	window := busyBenchWindow
	if v := os.Getenv(busyMinutesEnv); v != "" {
		m, err := strconv.ParseFloat(v, 64)
		if err != nil || m <= 0 {
			b.Fatalf("%s=%q: want a positive number of minutes", busyMinutesEnv, v)
		}
		window = time.Duration(m * float64(time.Minute))
	}
	var rows []busyRow
	for _, bc := range busyCases {
		b.Run(strings.ReplaceAll(bc.name, " ", "-"), func(b *testing.B) {
			for b.Loop() {
				rows = append(rows, benchBusy(b, bc, window))
			}
		})
	}
	printBusyTable(os.Stdout, rows, window)
}

// benchBusy is one case: a cluster of its own, the pressure window, then the deaths.
func benchBusy(b *testing.B, bc busyCase, window time.Duration) busyRow {
	cpu.Require(b)
	c := newCluster(b, 3)
	ccm := c.startCCM(b)
	svc, addrs := c.createLBService(b, "bench-busy")
	node, agent := c.busyAnnouncer(b, svc, addrs, bc)
	r := busyRow{name: bc.name, pressure: c.underPressure(b, ccm, svc, addrs, node, window)}
	b.Logf("%s: %v", bc.name, r.pressure)

	// The deaths, each of the node that announces, its agent squeezed: after a death the
	// Service stays with its standby (no failback), so each trial moves the squeeze along.
	start := time.Now()
	detected := 0
	for range benchTrials {
		tr, restarts := agent.killAnnouncer(b, c, ccm, svc, addrs[0])
		r.restarts += restarts
		r.outages = append(r.outages, tr.outage)
		if !tr.detected.IsZero() {
			r.detections = append(r.detections, tr.detected.Sub(tr.injected))
			detected++
		}
		r.trials++
	}
	r.trialDowns = len(logTimes(ccm.Logs(), start, time.Now(), `"Agent state changed"`, `state="down"`)) - detected
	slices.Sort(r.detections)
	slices.Sort(r.outages)
	return r
}

// printBusyTable prints the busy-node table.
func printBusyTable(w *os.File, rows []busyRow, window time.Duration) {
	fmt.Fprintf(w, "\nbusy node: the announcer's agent at the DaemonSet's CPU request (%dm) beside %d busy loops in a group requesting %d cores; %v of pressure with an open-loop client on both addresses (1 request per 10 ms each, 100 ms timeout), then %d deaths (link down) of the busy announcer under it; times in ms\n",
		agentCPURequest, runtime.NumCPU(), runtime.NumCPU(), window, benchTrials)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The case names left-aligned, the figures right-aligned.
	width := len("case")
	for _, r := range rows {
		width = max(width, len(r.name))
	}
	fmt.Fprintf(tw, "%-*s\tpressure minutes\tfalse failovers\tlive agents down\tfailed requests\tdetection p50\tp99\toutage p50\tp99\t\n", width, "case")
	for _, r := range rows {
		p := r.pressure
		det50, det99 := "-", "-"
		if d := r.detections; len(d) > 0 {
			det50, det99 = fmt.Sprintf("%.1f", ms(percentile(d, 50))), fmt.Sprintf("%.1f", ms(percentile(d, 99)))
		}
		fmt.Fprintf(tw, "%-*s\t%.1f\t%d\t%d\t%d of %d\t%s\t%s\t%.1f\t%.1f\t\n", width, r.name, p.window.Minutes(), p.falseFailovers(), p.liveDowns(),
			p.failed, p.requests, det50, det99, ms(percentile(r.outages, 50)), ms(percentile(r.outages, 99)))
	}
	tw.Flush()
	for _, r := range rows {
		fmt.Fprintf(w, "  %s: %v; during the %d deaths, %d of them detected, %d live agents taken for down, %d deaths put off as the node was taken for down first\n",
			r.name, r.pressure, r.trials, len(r.detections), r.trialDowns, r.restarts)
	}
}
