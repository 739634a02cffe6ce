package realtime

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// Defaults of a Keeper: an agent answers probes with a few microseconds of CPU each, so
// half a core for a whole second is no agent's work but a fault's, or a burst, such as
// a relist of thousands of Services, that can wait like any other process's.
const (
	DefaultLimit   = 0.5
	DefaultWindow  = time.Second
	DefaultBackoff = 10 * time.Second
)

// Keeper holds the agent at a real-time priority while its CPU use stays within a
// limit, and under the fair scheduler for a while after it goes over.
type Keeper struct {
	// Priority is the SCHED_FIFO priority; 0 leaves the agent under the fair scheduler.
	Priority int
	// Limit is the CPU, in cores averaged over Window, above which the agent gives the
	// priority back for Backoff.
	Limit   float64
	Window  time.Duration
	Backoff time.Duration

	// usage returns the CPU time the process has used, and set is Set; tests change them.
	usage func() (time.Duration, error)
	set   func(prio int) error
}

// NewKeeper returns a Keeper of priority prio with the default limit.
func NewKeeper(prio int) *Keeper {
	return &Keeper{Priority: prio, Limit: DefaultLimit, Window: DefaultWindow, Backoff: DefaultBackoff, usage: cpuTime, set: Set}
}

var (
	priorityGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "baremetal_agent",
		Name:           "realtime_priority",
		Help:           "The SCHED_FIFO priority the agent's threads run at; 0 while they run under the fair scheduler (priority off or refused, or given back for using too much CPU).",
		StabilityLevel: metrics.ALPHA,
	})
	demotions = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "baremetal_agent",
		Name:           "realtime_demotions_total",
		Help:           "Times the agent gave its real-time priority back for a while because it used more CPU than its limit.",
		StabilityLevel: metrics.ALPHA,
	})
)

// Metrics returns the package's metrics, for registration.
func Metrics() []metrics.Registerable { return []metrics.Registerable{priorityGauge, demotions} }

// Run raises the agent to its priority and keeps it there, within the limit, until ctx
// is done, then lowers it. A priority the kernel refuses is logged and not tried again.
func (k *Keeper) Run(ctx context.Context) {
	if k.Priority == 0 {
		return
	}
	if err := k.set(k.Priority); err != nil {
		klog.ErrorS(err, "Running under the fair scheduler: on a node whose pods use every core the agent may answer probes late, and the ccm move its addresses away", "priority", k.Priority)
		return
	}
	klog.InfoS("Running at a real-time priority", "policy", "SCHED_FIFO", "priority", k.Priority, "cpuLimit", k.Limit)
	priorityGauge.Set(float64(k.Priority))
	defer func() {
		if err := k.set(0); err != nil {
			klog.ErrorS(err, "Could not give the real-time priority back")
		}
		priorityGauge.Set(0)
	}()
	for {
		used, err := k.watch(ctx)
		if err != nil || ctx.Err() != nil {
			if err != nil {
				klog.ErrorS(err, "Giving the real-time priority back: cannot measure the agent's CPU use")
			}
			return
		}
		klog.InfoS("Giving the real-time priority back for a while: the agent used more CPU than its limit", "used", used, "window", k.Window, "limit", k.Limit, "for", k.Backoff)
		demotions.Inc()
		if err := k.set(0); err != nil {
			klog.ErrorS(err, "Could not give the real-time priority back")
		}
		priorityGauge.Set(0)
		select {
		case <-ctx.Done():
			return
		case <-time.After(k.Backoff):
		}
		if err := k.set(k.Priority); err != nil {
			klog.ErrorS(err, "Running under the fair scheduler from now on", "priority", k.Priority)
			return
		}
		klog.InfoS("Running at a real-time priority again", "priority", k.Priority)
		priorityGauge.Set(float64(k.Priority))
	}
}

// watch returns the cores the agent used over the last window once they are over the
// limit, or when ctx is done. It samples ten times a window.
func (k *Keeper) watch(ctx context.Context) (float64, error) {
	const samples = 10
	var ring [samples]time.Duration
	now, err := k.usage()
	if err != nil {
		return 0, err
	}
	for i := range ring {
		ring[i] = now
	}
	tick := time.NewTicker(k.Window / samples)
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % samples {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-tick.C:
		}
		now, err := k.usage()
		if err != nil {
			return 0, err
		}
		used := (now - ring[i]).Seconds() / k.Window.Seconds()
		ring[i] = now
		if used > k.Limit {
			return used, nil
		}
	}
}

// cpuTime returns the CPU time, user and system, the process has used.
func cpuTime() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, errors.Join(errors.New("getrusage"), err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
