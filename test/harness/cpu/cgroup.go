// Package cpu puts processes under CPU pressure for tests, the way pods on a busy node
// are: CPU cgroups set from Kubernetes CPU requests and limits as the kubelet sets them
// (Shares, Weight, Quota), and busy loops that spin in such a group (Busy). It needs
// root and a writable cgroup hierarchy with the cpu controller, version 1 (cpu.shares,
// cpu.cfs_quota_us) or 2 (cpu.weight, cpu.max), whichever the machine mounts.
//
// Every group is created at the top of the hierarchy, next to the kubelet's kubepods
// and the system's slices, under a name that starts with baremetal-test-<pid>-, the ID
// of the process that created it, so that Sweep can remove what a crashed run left
// behind.
package cpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// namePrefix starts the name of every group this package creates.
const namePrefix = "baremetal-test-"

// groups numbers the groups of this process, so that names are unique.
var groups atomic.Int64

// Hierarchy is where the cpu controller is mounted.
type Hierarchy struct {
	// V2 says that it is the unified hierarchy (cgroup v2).
	V2 bool
	// CPU is the mount point of the hierarchy that holds the cpu controller.
	CPU string
	// Acct is, on cgroup v1, the mount point of the cpuacct controller, which counts CPU
	// time: CPU itself when the two are mounted together, "" when cpuacct is not mounted.
	// Unused on cgroup v2, whose cpu.stat counts CPU time.
	Acct string
}

// roots returns the hierarchies a group has a directory in: the cpu controller's, and
// on cgroup v1 the cpuacct controller's when it is mounted apart.
func (h Hierarchy) roots() []string {
	if !h.V2 && h.Acct != "" && h.Acct != h.CPU {
		return []string{h.CPU, h.Acct}
	}
	return []string{h.CPU}
}

// FindHierarchy returns where this machine mounts the cpu controller, from
// /proc/self/mountinfo; on cgroup v2, only if the hierarchy offers the controller
// (cgroup.controllers lists cpu).
var FindHierarchy = sync.OnceValues(func() (Hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Hierarchy{}, fmt.Errorf("find the cpu cgroup controller: %w", err)
	}
	defer f.Close()
	return parseMountinfo(f, func(mount string) (string, error) {
		b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
		return string(b), err
	})
})

// parseMountinfo finds the cpu controller in a mountinfo(5) listing. controllers reads
// the cgroup.controllers file of a cgroup v2 mount. A v2 hierarchy that offers cpu wins:
// the kernel gives a controller to one hierarchy only, so a v1 mount of cpu beside it is
// not possible, and one without cpu is the hybrid layout's empty unified tree.
func parseMountinfo(r io.Reader, controllers func(mount string) (string, error)) (Hierarchy, error) {
	var v1 Hierarchy
	var v2 []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		// ID parent major:minor root mountpoint options [optional fields...] - fstype source superoptions
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		mount := unescape(fields[4])
		switch tail[0] {
		case "cgroup2":
			v2 = append(v2, mount)
		case "cgroup":
			opts := strings.Split(tail[2], ",")
			if slices.Contains(opts, "cpu") && v1.CPU == "" {
				v1.CPU = mount
			}
			if slices.Contains(opts, "cpuacct") && v1.Acct == "" {
				v1.Acct = mount
			}
		}
	}
	if err := s.Err(); err != nil {
		return Hierarchy{}, fmt.Errorf("find the cpu cgroup controller: read mountinfo: %w", err)
	}
	for _, mount := range v2 {
		list, err := controllers(mount)
		if err == nil && slices.Contains(strings.Fields(list), "cpu") {
			return Hierarchy{V2: true, CPU: mount}, nil
		}
	}
	if v1.CPU != "" {
		return v1, nil
	}
	return Hierarchy{}, fmt.Errorf("find the cpu cgroup controller: no cgroup v1 hierarchy mounts it and no cgroup v2 hierarchy offers it (cgroup2 mounts: %q)", v2)
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// A Group is a CPU cgroup that this process created. Its methods are safe for concurrent
// use.
type Group struct {
	name string
	h    Hierarchy
	// dirs are the group's directories: in the cpu hierarchy first, then, on cgroup v1
	// with cpuacct mounted apart, in that one, so that its CPU time is counted.
	dirs []string

	mu     sync.Mutex
	closed bool
}

// New creates a CPU cgroup whose name ends in name, at the top of the hierarchy, with no
// processes in it and the settings it inherits. Close removes it. New sweeps away, once
// per process, what runs that crashed left behind.
func New(name string) (*Group, error) {
	h, err := FindHierarchy()
	if err != nil {
		return nil, err
	}
	sweepOnce()
	full := fmt.Sprintf("%s%d-%d-%s", namePrefix, os.Getpid(), groups.Add(1), name)
	g := &Group{name: full, h: h}
	if h.V2 {
		// A child gets the cpu interface files only once its parent hands the
		// controller down. Writing it again when it is on already changes nothing.
		if err := write(filepath.Join(h.CPU, "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, fmt.Errorf("create cgroup %s: enable the cpu controller for the children of %s: %w", full, h.CPU, err)
		}
	}
	for _, root := range h.roots() {
		dir := filepath.Join(root, full)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.Close()
			return nil, fmt.Errorf("create cgroup %s: %w", full, err)
		}
		g.dirs = append(g.dirs, dir)
	}
	return g, nil
}

// New creates a group whose name ends in name inside g, as New does at the top: its
// processes share what g gets, in proportion to the requests of g's children.
func (g *Group) New(name string) (*Group, error) {
	full := fmt.Sprintf("%s/%d-%s", g.name, groups.Add(1), name)
	sub := &Group{name: full, h: g.h}
	if g.h.V2 {
		if err := write(filepath.Join(g.Path(), "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, fmt.Errorf("create cgroup %s: enable the cpu controller for the children of %s: %w", full, g.name, err)
		}
	}
	for _, parent := range g.dirs {
		dir := filepath.Join(parent, filepath.Base(full))
		if err := os.Mkdir(dir, 0o755); err != nil {
			sub.Close()
			return nil, fmt.Errorf("create cgroup %s: %w", full, err)
		}
		sub.dirs = append(sub.dirs, dir)
	}
	return sub, nil
}

// Name returns the group's name in the hierarchy.
func (g *Group) Name() string { return g.name }

// Path returns the group's directory in the hierarchy of the cpu controller.
func (g *Group) Path() string { return g.dirs[0] }

// SetRequest gives the group the CPU weight of a container that requests milli
// millicores: cpu.shares = Shares(milli) on cgroup v1, cpu.weight = Weight(Shares(milli))
// on v2. Under contention, siblings share the CPU in proportion to it.
func (g *Group) SetRequest(milli int64) error {
	file, value := "cpu.shares", strconv.FormatUint(Shares(milli), 10)
	if g.h.V2 {
		file, value = "cpu.weight", strconv.FormatUint(Weight(Shares(milli)), 10)
	}
	if err := write(filepath.Join(g.Path(), file), value); err != nil {
		return fmt.Errorf("cgroup %s: set the CPU request %dm: %w", g.name, milli, err)
	}
	return nil
}

// SetLimit gives the group the CFS quota of a container whose CPU limit is milli
// millicores: Quota(milli) of CPU time in each QuotaPeriod, after which its processes
// wait for the next period (they are throttled). 0 removes the quota.
func (g *Group) SetLimit(milli int64) error {
	period, quota := QuotaPeriod.Microseconds(), Quota(milli).Microseconds()
	var err error
	if g.h.V2 {
		max := "max"
		if quota > 0 {
			max = strconv.FormatInt(quota, 10)
		}
		err = write(filepath.Join(g.Path(), "cpu.max"), fmt.Sprintf("%s %d", max, period))
	} else {
		if quota == 0 {
			quota = -1
		}
		// The period first: the kernel checks the quota against the period it has.
		err = write(filepath.Join(g.Path(), "cpu.cfs_period_us"), strconv.FormatInt(period, 10))
		if err == nil {
			err = write(filepath.Join(g.Path(), "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
		}
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: set the CPU limit %dm: %w", g.name, milli, err)
	}
	return nil
}

// AllowRealtime lets the group's processes run at a real-time priority, as every process
// may on a kernel without real-time group scheduling (CONFIG_RT_GROUP_SCHED), the common
// build: on cgroup v1 of a kernel with it, where a new group has no real-time time, it
// gives the group the host's (kernel.sched_rt_runtime_us), the group's parent first. Set
// it on the outer group before the inner one. Elsewhere it does nothing.
func (g *Group) AllowRealtime() error {
	file := filepath.Join(g.Path(), "cpu.rt_runtime_us")
	if g.h.V2 {
		return nil
	}
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	runtime, err := os.ReadFile("/proc/sys/kernel/sched_rt_runtime_us")
	if err != nil {
		return fmt.Errorf("cgroup %s: allow real-time priorities: %w", g.name, err)
	}
	if err := write(file, strings.TrimSpace(string(runtime))); err != nil {
		return fmt.Errorf("cgroup %s: allow real-time priorities: %w", g.name, err)
	}
	return nil
}

// Add moves the process pid, with all its threads, into the group.
func (g *Group) Add(pid int) error {
	for _, dir := range g.dirs {
		if err := write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup %s: add process %d: %w", g.name, pid, err)
		}
	}
	return nil
}

// Remove moves the process pid, with all its threads, out of the group to the top of the
// hierarchy, where processes that no one placed run.
func (g *Group) Remove(pid int) error {
	for _, dir := range g.dirs {
		if err := write(filepath.Join(filepath.Dir(dir), "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup %s: move process %d out: %w", g.name, pid, err)
		}
	}
	return nil
}

// Pids returns the processes in the group.
func (g *Group) Pids() ([]int, error) {
	pids, err := readPids(filepath.Join(g.Path(), "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: list processes: %w", g.name, err)
	}
	return pids, nil
}

// Stat is what the kernel counts of a group's CPU use.
type Stat struct {
	// Usage is the CPU time its processes used, all cores added up.
	Usage time.Duration
	// Periods is how many CFS periods with runnable processes have passed since the group
	// had a quota; Throttled how many of them ended with the quota used up, and
	// ThrottledTime how long its processes waited for the next period, added up.
	Periods, Throttled int64
	ThrottledTime      time.Duration
}

// Stat reads the group's CPU time and throttling. On cgroup v1 without a cpuacct
// hierarchy, Usage is -1: nothing counts it.
func (g *Group) Stat() (Stat, error) {
	fields, err := readKeyed(filepath.Join(g.Path(), "cpu.stat"))
	if err != nil {
		return Stat{}, fmt.Errorf("cgroup %s: read cpu.stat: %w", g.name, err)
	}
	st := Stat{Periods: fields["nr_periods"], Throttled: fields["nr_throttled"]}
	if g.h.V2 {
		st.Usage = time.Duration(fields["usage_usec"]) * time.Microsecond
		st.ThrottledTime = time.Duration(fields["throttled_usec"]) * time.Microsecond
		return st, nil
	}
	st.ThrottledTime = time.Duration(fields["throttled_time"]) // nanoseconds
	st.Usage = -1
	if g.h.Acct != "" {
		dir := g.dirs[len(g.dirs)-1] // the cpu group itself when both are mounted together
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return Stat{}, fmt.Errorf("cgroup %s: read cpuacct.usage: %w", g.name, err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("cgroup %s: cpuacct.usage %q: %w", g.name, b, err)
		}
		st.Usage = time.Duration(ns)
	}
	return st, nil
}

// Close moves every process left in the group to the top of the hierarchy and removes
// the group. Closing a closed group does nothing.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for _, dir := range slices.Backward(g.dirs) {
		if err := remove(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", g.name, err))
		}
	}
	return errors.Join(errs...)
}

// remove empties the cgroup at dir, and the groups in it, into its parent and removes
// them.
func remove(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	parent := filepath.Join(filepath.Dir(dir), "cgroup.procs")
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, pid := range pids {
			// A process that exited meanwhile is gone from the group anyway.
			if err := write(parent, strconv.Itoa(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("move process %d to %s: %w", pid, filepath.Dir(dir), err)
			}
		}
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// EBUSY: a process forked into the group since it was listed, or an exited one
		// is not yet reaped and still counts as a member. Both pass.
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepOnce runs Sweep before the first group of the process is created. What it fails
// to remove stays behind but is in no one's way, the groups of this process having names
// of their own (its pid in them); TestSweep reports Sweep's errors.
var sweepOnce = sync.OnceFunc(func() { _ = Sweep() })

// Sweep removes the groups of this package whose creator (the pid in their name) is no
// longer alive, moving any process left in them to the top of the hierarchy first, so
// that a run that crashed leaves nothing behind for the next. Groups of live processes,
// this one included, are left alone: they may belong to tests running in parallel. New
// calls Sweep once per process.
func Sweep() error {
	h, err := FindHierarchy()
	if err != nil {
		return err
	}
	var errs []error
	for _, root := range h.roots() {
		entries, err := os.ReadDir(root)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep cgroups: %w", err))
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !process.Orphaned(namePrefix, e.Name()) {
				continue
			}
			if err := remove(filepath.Join(root, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("sweep cgroups: remove %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// write writes value to a cgroup file in one write(2), as the kernel wants it.
func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readPids reads a cgroup.procs file.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is no pid", path, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// readKeyed reads a flat keyed file such as cpu.stat: a key and a number per line.
func readKeyed(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
