package cpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

func TestShares(t *testing.T) {
	for _, c := range []struct {
		milli int64
		want  uint64
	}{
		{0, 2},           // BestEffort
		{1, 2},           // 1.024 rounds down below the floor
		{2, 2},           // 2.048
		{3, 3},           // 3.072
		{20, 20},         // the agent DaemonSet's request: 20.48
		{100, 102},       // 102.4
		{250, 256},       // 256
		{1000, 1024},     // a core
		{2000, 2048},     // every core of a 2-core node
		{256000, 262144}, // the most the kernel takes
		{1000000, 262144},
	} {
		if got := Shares(c.milli); got != c.want {
			t.Errorf("Shares(%dm) = %d, want %d", c.milli, got, c.want)
		}
	}
}

func TestWeight(t *testing.T) {
	for _, c := range []struct {
		shares, want uint64
	}{
		{0, 1}, // below the floor: as 2
		{2, 1},
		{20, 1},    // 1 + 18×9999/262142 = 1.69
		{28, 1},    // 1.99
		{29, 2},    // 2.03
		{102, 4},   // 100m
		{1024, 39}, // a core: the kubelet's 39, not the v2 default of 100
		{2048, 79}, // two cores
		{262144, 10000},
		{1 << 20, 10000},
	} {
		if got := Weight(c.shares); got != c.want {
			t.Errorf("Weight(%d) = %d, want %d", c.shares, got, c.want)
		}
	}
}

func TestQuota(t *testing.T) {
	for _, c := range []struct {
		milli int64
		want  time.Duration
	}{
		{0, 0}, // no limit
		{1, time.Millisecond},
		{5, time.Millisecond}, // 0.5 ms, raised to the least quota
		{10, time.Millisecond},
		{20, 2 * time.Millisecond},
		{100, 10 * time.Millisecond},
		{250, 25 * time.Millisecond},
		{1000, 100 * time.Millisecond},
		{2500, 250 * time.Millisecond}, // more than a period: several cores' worth
	} {
		if got := Quota(c.milli); got != c.want {
			t.Errorf("Quota(%dm) = %v, want %v", c.milli, got, c.want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	const (
		v1Apart = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
		v1Together = `25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
29 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpuset
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
`
		v2 = `22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
		escaped = `35 24 0:30 / /mnt/my\040cgroups rw - cgroup cgroup rw,cpu
`
		none = `22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
`
	)
	offers := map[string]string{
		"/sys/fs/cgroup":         "cpuset cpu io memory hugetlb pids rdma misc",
		"/sys/fs/cgroup/unified": "",
	}
	controllers := func(mount string) (string, error) {
		list, ok := offers[mount]
		if !ok {
			return "", os.ErrNotExist
		}
		return list, nil
	}
	for _, c := range []struct {
		name, mountinfo string
		want            Hierarchy
		err             string
	}{
		{"v1, cpuacct apart, an empty unified tree", v1Apart, Hierarchy{CPU: "/sys/fs/cgroup/cpu", Acct: "/sys/fs/cgroup/cpuacct"}, ""},
		{"v1, cpu and cpuacct together", v1Together, Hierarchy{CPU: "/sys/fs/cgroup/cpu,cpuacct", Acct: "/sys/fs/cgroup/cpu,cpuacct"}, ""},
		{"v2", v2, Hierarchy{V2: true, CPU: "/sys/fs/cgroup"}, ""},
		{"escaped mount point", escaped, Hierarchy{CPU: "/mnt/my cgroups"}, ""},
		{"none", none, Hierarchy{}, "no cgroup v1 hierarchy mounts it"},
		{"v2 without cpu", strings.ReplaceAll(v2, "/sys/fs/cgroup ", "/sys/fs/cgroup/unified "), Hierarchy{}, "no cgroup v1 hierarchy mounts it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(c.mountinfo), controllers)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("parseMountinfo = %+v, %v; want an error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseMountinfo = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// readSetting returns the content of one of g's files, trimmed.
func readSetting(t *testing.T, g *Group, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.Path(), file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSettings(t *testing.T) {
	g := GroupForTest(t, "settings")
	if err := g.SetRequest(20); err != nil {
		t.Fatal(err)
	}
	if err := g.SetLimit(100); err != nil {
		t.Fatal(err)
	}
	h, _ := FindHierarchy()
	if h.V2 {
		if got := readSetting(t, g, "cpu.weight"); got != "1" {
			t.Errorf("cpu.weight = %s after SetRequest(20), want 1", got)
		}
		if got := readSetting(t, g, "cpu.max"); got != "10000 100000" {
			t.Errorf("cpu.max = %q after SetLimit(100), want 10000 100000", got)
		}
	} else {
		if got := readSetting(t, g, "cpu.shares"); got != "20" {
			t.Errorf("cpu.shares = %s after SetRequest(20), want 20", got)
		}
		if got := readSetting(t, g, "cpu.cfs_period_us") + " " + readSetting(t, g, "cpu.cfs_quota_us"); got != "100000 10000" {
			t.Errorf("cpu.cfs_period_us, cpu.cfs_quota_us = %s after SetLimit(100), want 100000 10000", got)
		}
	}
	if err := g.SetLimit(0); err != nil {
		t.Fatal(err)
	}
	if h.V2 {
		if got := readSetting(t, g, "cpu.max"); got != "max 100000" {
			t.Errorf("cpu.max = %q after SetLimit(0), want max 100000", got)
		}
	} else if got := readSetting(t, g, "cpu.cfs_quota_us"); got != "-1" {
		t.Errorf("cpu.cfs_quota_us = %s after SetLimit(0), want -1", got)
	}
}

// A busy loop in a group with a quota is counted and throttled: what the end-to-end
// busy-node test relies on.
func TestBusyThrottled(t *testing.T) {
	g := GroupForTest(t, "throttled")
	if err := g.SetLimit(100); err != nil {
		t.Fatal(err)
	}
	b := BusyForTest(t, g, 1)
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, b.Pids()) {
		t.Fatalf("the group holds %v, want the busy loop %v", pids, b.Pids())
	}
	// Some periods in, once the loop has been throttled a few times.
	var first Stat
	deadline := time.Now().Add(5 * time.Second)
	for {
		if first, err = g.Stat(); err != nil {
			t.Fatal(err)
		}
		if first.Throttled >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a busy loop with a quota of %v per %v: %+v after 5 s, want it throttled", Quota(100), QuotaPeriod, first)
		}
		time.Sleep(50 * time.Millisecond) // polls the kernel's counters
	}
	const window = time.Second
	time.Sleep(window) // the window its use is measured over
	last, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	periods, throttled := last.Periods-first.Periods, last.Throttled-first.Throttled
	used := last.Usage - first.Usage
	t.Logf("in %v: %d periods, %d throttled, waited %v; used %v of CPU", window, periods, throttled, last.ThrottledTime-first.ThrottledTime, used)
	// About one per QuotaPeriod, each ending throttled. Bounds wide enough for a loaded
	// 2-core machine, where the loop may not run at all in some periods.
	if periods < 5 || throttled < periods/2 {
		t.Errorf("%d of %d periods throttled in %v, want most of about %d", throttled, periods, window, window/QuotaPeriod)
	}
	if last.Usage < 0 {
		t.Log("no cpuacct hierarchy: the group's CPU time is not counted")
		return
	}
	if used <= 0 || used > 2*window*Quota(100)/QuotaPeriod {
		t.Errorf("the busy loop used %v of CPU in %v, want at most about %v (its quota)", used, window, window*Quota(100)/QuotaPeriod)
	}
}

// Without a quota, a busy loop is counted at a core's worth when the machine has room.
func TestBusyCounted(t *testing.T) {
	g := GroupForTest(t, "counted")
	BusyForTest(t, g, 1)
	first, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage < 0 {
		t.Skip("no cpuacct hierarchy: the group's CPU time is not counted")
	}
	time.Sleep(500 * time.Millisecond) // the window its use is measured over
	last, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if used := last.Usage - first.Usage; used < 50*time.Millisecond {
		t.Errorf("a busy loop used %v of CPU in 500 ms, want a good part of a core", used)
	}
	if last.Throttled != 0 {
		t.Errorf("%d periods throttled without a quota", last.Throttled)
	}
}

// cgroupOf returns the path of pid's group in the cpu hierarchy, from /proc/<pid>/cgroup.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := FindHierarchy()
	for line := range strings.Lines(string(b)) {
		// hierarchy-ID:controllers:path; v2's controllers field is empty.
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if h.V2 && parts[0] == "0" || !h.V2 && slices.Contains(strings.Split(parts[1], ","), "cpu") {
			return parts[2]
		}
	}
	t.Fatalf("no cpu group in /proc/%d/cgroup:\n%s", pid, b)
	return ""
}

// Close moves what is left in a group out, threads and all, and removes it; Remove moves
// one process out.
func TestCloseMovesProcessesOut(t *testing.T) {
	Require(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	var pids []int
	for i := range 2 {
		p, err := process.Start(fmt.Sprintf("sleeper %d", i), sh, "-c", "exec sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Kill(); err != nil {
				t.Error(err)
			}
		})
		pids = append(pids, p.Pid())
	}
	before := cgroupOf(t, pids[0])
	g, err := New("close")
	if err != nil {
		t.Skipf("needs a writable cgroup hierarchy with the cpu controller: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	for _, pid := range pids {
		if err := g.Add(pid); err != nil {
			t.Fatal(err)
		}
	}
	if got := cgroupOf(t, pids[0]); got != "/"+g.Name() {
		t.Fatalf("after Add, process %d is in %s, want /%s", pids[0], got, g.Name())
	}
	if err := g.Remove(pids[1]); err != nil {
		t.Fatal(err)
	}
	if got, err := g.Pids(); err != nil || !slices.Equal(got, pids[:1]) {
		t.Errorf("after Remove(%d), the group holds %v, %v; want %v", pids[1], got, err, pids[:1])
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the group's directory after Close: %v, want it gone", err)
	}
	for _, pid := range pids {
		if got := cgroupOf(t, pid); got != "/" {
			t.Errorf("after Close, process %d is in %s, want / (it was in %s)", pid, got, before)
		}
		if !process.Alive(pid) {
			t.Errorf("process %d died when its group closed", pid)
		}
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Sweep removes the groups of processes that are gone, and only those.
func TestSweep(t *testing.T) {
	Require(t)
	h, _ := FindHierarchy()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(h.CPU, namePrefix+strconv.Itoa(dead.Process.Pid)+"-1-left")
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Skipf("needs a writable cgroup hierarchy with the cpu controller: %v", err)
	}
	t.Cleanup(func() { os.Remove(left) })
	live := GroupForTest(t, "live")
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Sweep: %v, want it gone", left, err)
	}
	if _, err := os.Stat(live.Path()); err != nil {
		t.Errorf("this process's group after Sweep: %v, want it kept", err)
	}
}

// TestCloseRemovesSubgroups: a group with a group inside, and a process in that one, is
// removed whole by Close, the process moved out, as a crashed run's would be by Sweep.
func TestCloseRemovesSubgroups(t *testing.T) {
	Require(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	p, err := process.Start("sleeper", sh, "-c", "exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
	})
	before := cgroupOf(t, p.Pid())
	parent, err := New("parent")
	if err != nil {
		t.Skipf("needs a writable cgroup hierarchy with the cpu controller: %v", err)
	}
	t.Cleanup(func() { parent.Close() })
	child, err := parent.New("child")
	if err != nil {
		t.Fatal(err)
	}
	if err := child.SetRequest(20); err != nil {
		t.Fatal(err)
	}
	if err := child.Add(p.Pid()); err != nil {
		t.Fatal(err)
	}
	if got := cgroupOf(t, p.Pid()); got != "/"+child.Name() {
		t.Fatalf("after Add, the process is in %s, want /%s", got, child.Name())
	}
	if err := parent.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent.Path()); !os.IsNotExist(err) {
		t.Errorf("after Close, %s is still there (%v)", parent.Path(), err)
	}
	if got := cgroupOf(t, p.Pid()); got != before {
		t.Errorf("after Close, the process is in %s, want %s where it was", got, before)
	}
}
