package realtime

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// policies returns the policy and priority of every thread of the process.
func policies(t *testing.T) map[int][2]uint32 {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][2]uint32{}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue
		}
		out[tid] = [2]uint32{a.Policy, a.Priority}
	}
	return out
}

// TestSet gives every thread of the process, and the threads the runtime creates after
// it, a policy, and takes it back. The policy is SCHED_BATCH, of the fair scheduler: the
// walk over the threads is the same for a real-time one, which this test does not take
// (see the package's doc on what one did to agents).
func TestSet(t *testing.T) {
	if err := setAll(unix.SchedAttr{Policy: unix.SCHED_BATCH}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Set(0); err != nil {
			t.Error(err)
		}
	}()
	// New threads: goroutines locked to their threads, blocked in a syscall together.
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	for tid, p := range policies(t) {
		if p != [2]uint32{unix.SCHED_BATCH, 0} {
			t.Errorf("thread %d runs with policy %d priority %d, want SCHED_BATCH", tid, p[0], p[1])
		}
	}
	close(release)
	done.Wait()
	if err := Set(0); err != nil {
		t.Fatal(err)
	}
	for tid, p := range policies(t) {
		if p != [2]uint32{unix.SCHED_NORMAL, 0} {
			t.Errorf("thread %d runs with policy %d priority %d after Set(0), want SCHED_NORMAL", tid, p[0], p[1])
		}
	}
	if err := Set(MaxPriority + 1); err == nil {
		t.Error("Set(100) took a priority the kernel does not have")
	}
}

// TestKeeperGivesBack: a Keeper gives the priority back once the agent uses more than its
// limit over a window, takes it again after the backoff, and gives it back when it stops.
func TestKeeperGivesBack(t *testing.T) {
	var mu sync.Mutex
	var used time.Duration
	var sets []int
	k := &Keeper{Priority: 3, Limit: 0.5, Window: 100 * time.Millisecond, Backoff: 50 * time.Millisecond,
		usage: func() (time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			return used, nil
		},
		set: func(prio int) error {
			mu.Lock()
			defer mu.Unlock()
			sets = append(sets, prio)
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { k.Run(ctx); close(stopped) }()
	setsNow := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), sets...)
	}
	waitSets := func(n int) []int {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(setsNow()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("sets %v after 5 s, want %d", setsNow(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return setsNow()
	}
	waitSets(1)
	// 40 ms of CPU in a 100 ms window: under the limit, for three windows.
	for range 30 {
		mu.Lock()
		used += 4 * time.Millisecond
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	if got := setsNow(); len(got) != 1 {
		t.Fatalf("sets %v at 0.4 cores, want [3] alone", got)
	}
	mu.Lock()
	used += 80 * time.Millisecond // 0.8 cores over the window
	mu.Unlock()
	if got := waitSets(3); got[1] != 0 || got[2] != 3 {
		t.Errorf("sets %v after going over the limit, want [3 0 3]", got)
	}
	cancel()
	<-stopped
	if got := setsNow(); got[len(got)-1] != 0 {
		t.Errorf("sets %v after Run returned, want the last 0", got)
	}
}

// TestKeeperRefused: a priority the kernel refuses leaves the agent as it is.
func TestKeeperRefused(t *testing.T) {
	var sets []int
	k := &Keeper{Priority: 1, Limit: 0.5, Window: time.Second, Backoff: time.Second,
		usage: func() (time.Duration, error) { return 0, nil },
		set: func(prio int) error {
			sets = append(sets, prio)
			return ErrNotPermitted
		},
	}
	k.Run(context.Background())
	if len(sets) != 1 {
		t.Errorf("sets %v, want one try", sets)
	}
	if !errors.Is(explain(unix.EPERM), ErrNotPermitted) {
		t.Error("EPERM is not explained")
	}
}
