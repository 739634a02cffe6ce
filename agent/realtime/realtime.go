// Package realtime runs the agent at a real-time scheduling priority, so that a node
// whose pods keep every core busy still has its probes and its ARP and NDP requests
// answered within milliseconds, and takes the priority back while the agent uses more
// CPU than it should, so that no bug or burst of work in it can starve the node.
//
// Under the kernel's fair scheduler a container weighs what its CPU request gives it:
// the agent's 20m weigh 20 against 2,048 for pods that request two cores, and a busy
// node leaves it waiting hundreds of milliseconds, at times seconds, for a core. The
// ccm's prober would take such a node for dead. A thread at a real-time priority runs
// before every thread of the fair scheduler, whatever their weights. This is what
// keepalived's vrrp_rt_priority does for VRRP.
//
// The priority is a thread's, not a process's, and the Go runtime runs goroutines on
// threads it creates at any time, so every thread gets it: a thread inherits its
// creator's policy, so once all have it every new one has it too.
//
// Experimental: agents at SCHED_FIFO 1 have been seen, in a failover benchmark on two
// cores, each to spin one thread at a whole core for 27 minutes, starving their machine,
// while the Keeper, in the same process, never ran to give the priority back. Until that
// is understood the agent takes no priority unless told to.
package realtime

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxPriority is the highest priority Set takes, as sched_setattr(2) counts them.
const MaxPriority = 99

// Set puts every thread of the process under SCHED_FIFO at priority prio, or, for prio
// 0, back under the fair scheduler (SCHED_OTHER). Threads the runtime creates meanwhile
// inherit their creator's policy, so it goes over the threads until a pass finds each
// as it should be.
func Set(prio int) error {
	if prio < 0 || prio > MaxPriority {
		return fmt.Errorf("real-time priority %d: want 0 (none) to %d", prio, MaxPriority)
	}
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if prio == 0 {
		attr = unix.SchedAttr{Policy: unix.SCHED_NORMAL}
	}
	return setAll(attr)
}

// setAll sets attr on every thread of the process, and on those created meanwhile.
func setAll(attr unix.SchedAttr) error {
	for pass := 0; ; pass++ {
		changed, err := setThreads(&attr)
		if err != nil || changed == 0 {
			return err
		}
		if pass == 10 {
			return fmt.Errorf("set the scheduling policy of the agent's threads: %d changed in the tenth pass", changed)
		}
	}
}

// setThreads sets attr on each thread of the process that lacks it, and returns how many
// it changed.
func setThreads(attr *unix.SchedAttr) (changed int, err error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("list the agent's threads: %w", err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		got, err := unix.SchedGetAttr(tid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // the thread exited
		}
		if err != nil {
			return changed, fmt.Errorf("read the scheduling policy of thread %d: %w", tid, err)
		}
		if got.Policy == attr.Policy && got.Priority == attr.Priority {
			continue
		}
		a := *attr
		if err := unix.SchedSetAttr(tid, &a, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return changed, fmt.Errorf("set the scheduling policy of thread %d: %w", tid, explain(err))
		}
		changed++
	}
	return changed, nil
}

// ErrNotPermitted says the kernel refused the priority.
var ErrNotPermitted = errors.New("not permitted: the agent needs CAP_SYS_NICE, and on a kernel with real-time group scheduling (CONFIG_RT_GROUP_SCHED) its cgroup needs a cpu.rt_runtime_us")

func explain(err error) error {
	if errors.Is(err, unix.EPERM) {
		return ErrNotPermitted
	}
	return err
}
