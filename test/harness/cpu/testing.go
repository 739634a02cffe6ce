package cpu

import (
	"os"
	"testing"
)

// Require skips the test unless it runs as root on a machine whose cpu cgroup controller
// it can use, saying which of the two is missing. Unlike a network namespace, a usable
// cgroup hierarchy is not a given on CI (a container may see it read-only), so it skips
// there too.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create CPU cgroups; run the test as root (go test -exec sudo …)")
	}
	if _, err := FindHierarchy(); err != nil {
		t.Skipf("needs a cgroup hierarchy with the cpu controller: %v", err)
	}
}

// GroupForTest creates a group for the test as New does, skipping the test as Require
// does where that is impossible (or the hierarchy is read-only), and closes it, moving
// whatever is left in it out, when the test and its subtests are done, whether they
// passed or not.
func GroupForTest(t testing.TB, name string) *Group {
	return SubgroupForTest(t, nil, name)
}

// SubgroupForTest is GroupForTest with the group inside parent; nil for the top.
func SubgroupForTest(t testing.TB, parent *Group, name string) *Group {
	t.Helper()
	Require(t)
	newGroup := New
	if parent != nil {
		newGroup = parent.New
	}
	g, err := newGroup(name)
	if err != nil {
		t.Skipf("needs a writable cgroup hierarchy with the cpu controller: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close the test's cgroup: %v", err)
		}
	})
	return g
}

// BusyForTest starts n busy loops in g as StartBusy does, and stops them when the test
// and its subtests are done. Call it after GroupForTest: cleanups run last-registered
// first, so the loops are gone before their group is removed.
func BusyForTest(t testing.TB, g *Group, n int) *Busy {
	t.Helper()
	b, err := StartBusy(g, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("stop the test's busy loops: %v", err)
		}
	})
	return b
}

// PressureForTest keeps n cores busy for the test, as pods that request n whole cores and
// use them do: n busy loops in a group of their own, inside parent (nil for the top),
// with the shares of n cores (on 2 cores, 2,048 shares: a node whose allocatable CPU is
// all requested). It returns that
// group and the loops, which stop, and the group goes, when the test is done.
func PressureForTest(t testing.TB, parent *Group, n int) (*Group, *Busy) {
	t.Helper()
	g := SubgroupForTest(t, parent, "busy")
	if err := g.SetRequest(int64(n) * 1000); err != nil {
		t.Fatal(err)
	}
	return g, BusyForTest(t, g, n)
}
