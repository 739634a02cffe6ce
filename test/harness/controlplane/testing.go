package controlplane

import (
	"context"
	"errors"
	"fmt"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"os"
	"sync"
	"testing"
	"time"
)

// The control plane shared by the tests of one package (one test binary), started by the
// first test that asks for it, so that `go test -run` of tests that need none pays
// nothing.
var shared struct {
	mu        sync.Mutex
	inTestRun bool // RunTests is running
	started   bool
	cp        *ControlPlane
	err       error
	reported  bool // err has been reported in full
	startTime time.Duration
	opts      []Option
}

// RunTests runs the package's tests for TestMain and returns the exit code for os.Exit.
// The tests share one control plane, started with opts by the first call to Shared.
// RunTests stops it when the tests are done, and first prints its logs to stderr if any
// test failed. Should a test panic, RunTests never gets to stop it, but the children
// die with the test binary (see process.StartCmd).
func RunTests(m *testing.M, opts ...Option) int {
	shared.mu.Lock()
	shared.inTestRun = true
	shared.opts = opts
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	cp := shared.cp
	if cp == nil {
		return code
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "\nSome tests failed; logs of the shared control plane follow.\n%s\n", cp.Logs())
	}
	stopStart := time.Now()
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the shared control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "shared control plane: started in %s, stopped in %s\n",
			shared.startTime.Round(time.Millisecond), time.Since(stopStart).Round(time.Millisecond))
	}
	return code
}

// Shared returns the package's shared control plane, starting it on first use. It ends
// the test, as a skip or a failure (see SkipOrFail), when the control plane cannot be had.
// TestMain must call RunTests.
func Shared(t testing.TB) *ControlPlane {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inTestRun {
		t.Fatal("controlplane.Shared needs TestMain to run the tests with controlplane.RunTests")
	}
	if !shared.started {
		shared.started = true
		begin := time.Now()
		shared.cp, shared.err = Start(context.Background(), shared.opts...)
		shared.startTime = time.Since(begin)
		if shared.err != nil {
			shared.err = fmt.Errorf("start the shared control plane: %w", shared.err)
		}
	}
	if err := shared.err; err != nil {
		// The start error quotes the logs: once is enough.
		if shared.reported && !errors.Is(err, ErrBinaryNotFound) {
			err = errors.New("the shared control plane did not start; the first test that asked for it says why")
		}
		shared.reported = true
		SkipOrFail(t, err)
	}
	return shared.cp
}

// StartForTest starts a control plane of the test's own, for a test that needs options
// the shared one lacks. It is stopped when the test ends, after its logs are logged if
// the test failed.
func StartForTest(t testing.TB, opts ...Option) *ControlPlane {
	t.Helper()
	cp, err := Start(t.Context(), opts...)
	if err != nil {
		SkipOrFail(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.Logs())
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}

// SkipOrFail ends the test because no control plane (or another of the tools, such as
// kube-proxy) could be started. Missing binaries skip the test, unless $CI is true: CI
// must not pass by running nothing. Any other start error fails the test, since binaries
// that are there but do not start are a bug.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrBinaryNotFound) && !ci.Running() {
		t.Skipf("%v; run `make tools` to build etcd, kube-apiserver, kube-controller-manager and kube-proxy into hack/tools/bin, or set %s", err, BinDirEnv)
	}
	t.Fatal(err)
}

// ControllerManagerForTest starts kube-controller-manager against c for the test, as
// StartControllerManager does with controllers, ending the test as SkipOrFail does when it
// cannot. It is stopped when the test ends, after its log is logged if the test failed.
func ControllerManagerForTest(t testing.TB, c *ControlPlane, controllers ...string) *ControllerManager {
	t.Helper()
	m, err := c.StartControllerManager(t.Context(), controllers...)
	if err != nil {
		SkipOrFail(t, err)
	}
	stopForTest(t, "kube-controller-manager", m.Logs, m.Stop)
	return m
}

// SchedulerForTest starts kube-scheduler against c for the test, as StartScheduler does,
// ending the test as SkipOrFail does when it cannot. It is stopped when the test ends,
// after its log is logged if the test failed.
func SchedulerForTest(t testing.TB, c *ControlPlane) *Scheduler {
	t.Helper()
	s, err := c.StartScheduler(t.Context())
	if err != nil {
		SkipOrFail(t, err)
	}
	stopForTest(t, "kube-scheduler", s.Logs, s.Stop)
	return s
}

// stopForTest stops the program called name when t ends, logging its log first if t failed.
func stopForTest(t testing.TB, name string, logs func() string, stop func() error) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs())
		}
		if err := stop(); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
}
