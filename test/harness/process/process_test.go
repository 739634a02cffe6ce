package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func shell(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	return sh
}

// startShell starts sh -c script and stops it, if need be, when the test ends.
func startShell(t *testing.T, name, script string) *Process {
	t.Helper()
	p, err := Start(name, shell(t), "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Errorf("Kill %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("%s (pid %d) output:\n%s", name, p.Pid(), p.Logs())
		}
	})
	return p
}

// waitForLine waits for a line of p's output that starts with prefix and returns it.
func waitForLine(t *testing.T, p *Process, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for line := range strings.Lines(p.Logs()) {
			if strings.HasPrefix(line, prefix) {
				return strings.TrimSpace(line)
			}
		}
		select {
		case <-p.Exited():
			t.Fatalf("%s exited before printing %q: %v", p.Name(), prefix, p.ExitError())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q in time", p.Name(), prefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readyPID waits for the line "ready PID" that the scripts below print and returns PID.
func readyPID(t *testing.T, p *Process) int {
	t.Helper()
	line := waitForLine(t, p, "ready ")
	pid, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
	if err != nil {
		t.Fatalf("%s printed %q: %v", p.Name(), line, err)
	}
	return pid
}

func TestStartAndStop(t *testing.T) {
	p := startShell(t, "graceful", `trap 'echo got TERM; exit 0' TERM
echo to stdout
echo to stderr >&2
echo ready $$
while :; do sleep 0.05; done`)
	if got := p.Name(); got != "graceful" {
		t.Errorf("Name() = %q, want graceful", got)
	}
	if pid := readyPID(t, p); pid != p.Pid() {
		t.Errorf("the child says its pid is %d, Pid() = %d", pid, p.Pid())
	}
	if err := p.ExitError(); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Errorf("ExitError while running = %v, want an error saying it is still running", err)
	}

	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Stop returned")
	}
	if err := p.ExitError(); err != nil {
		t.Errorf("ExitError after exit 0 = %v, want nil", err)
	}
	for _, want := range []string{"to stdout\n", "to stderr\n", "got TERM\n"} {
		if !strings.Contains(p.Logs(), want) {
			t.Errorf("Logs() lacks %q:\n%s", want, p.Logs())
		}
	}
	if Alive(p.Pid()) {
		t.Errorf("process %d still runs after Stop", p.Pid())
	}
	if err := p.Stop(time.Second); err == nil || !strings.Contains(err.Error(), "had exited before it was stopped") {
		t.Errorf("second Stop = %v, want an error saying it had exited", err)
	}
}

// A child that ignores SIGTERM is killed, with what it started.
func TestStopKillsProcessGroup(t *testing.T) {
	p := startShell(t, "stubborn", `trap '' TERM
sleep 600 &
echo ready $!
wait`)
	grandchild := readyPID(t, p)

	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Errorf("Stop = %v, want an error saying it was killed", err)
	}
	var exitErr *exec.ExitError
	if err := p.ExitError(); !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("ExitError = %v, want death by SIGKILL", err)
	}
	waitForDeath(t, grandchild)
}

func TestKill(t *testing.T) {
	p := startShell(t, "victim", `sleep 600 &
echo ready $!
wait`)
	grandchild := readyPID(t, p)

	if err := p.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Kill returned")
	}
	if Alive(p.Pid()) {
		t.Errorf("process %d still runs after Kill", p.Pid())
	}
	waitForDeath(t, grandchild)
	if err := p.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
}

func TestExitedOnItsOwn(t *testing.T) {
	p := startShell(t, "quitter", `for i in 1 2 3 4 5; do echo line $i; done; exit 3`)
	select {
	case <-p.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("sh did not exit")
	}
	var exitErr *exec.ExitError
	if err := p.ExitError(); !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Errorf("ExitError = %v, want exit status 3", err)
	}
	if err := p.Stop(time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Stop = %v, want an error quoting exit status 3", err)
	}
	if err := p.Kill(); err != nil {
		t.Errorf("Kill after exit: %v", err)
	}

	for _, tt := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "line 5"},
		{2, "line 4\nline 5"},
		{10, "line 1\nline 2\nline 3\nline 4\nline 5"},
	} {
		if got := p.Tail(tt.n); got != tt.want {
			t.Errorf("Tail(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestStartCmd(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(shell(t), "-c", `echo "$PROCESS_TEST_VALUE $(pwd -P)"
read -r pid comm state ppid pgrp rest </proc/$$/stat
echo "pid $pid pgrp $pgrp"`)
	cmd.Env = append(os.Environ(), "PROCESS_TEST_VALUE=from-env")
	cmd.Dir = dir
	// Setpgid and Pdeathsig are forced; the rest is kept.
	attr := &syscall.SysProcAttr{Setpgid: false, Pgid: 1}
	cmd.SysProcAttr = attr
	p, err := StartCmd("prepared", cmd)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if err := p.ExitError(); err != nil {
		t.Fatalf("sh: %v\n%s", err, p.Logs())
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("from-env %s\npid %d pgrp %[2]d", realDir, p.Pid())
	if got := p.Logs(); strings.TrimSpace(got) != want {
		t.Errorf("output %q, want %q: the environment, directory and a process group of its own", got, want)
	}
	if got := *attr; got.Setpgid || got.Pgid != 1 || got.Pdeathsig != 0 {
		t.Errorf("the caller's SysProcAttr was changed: %+v", got)
	}
	if got := cmd.SysProcAttr; !got.Setpgid || got.Pgid != 0 || got.Pdeathsig != syscall.SIGKILL {
		t.Errorf("SysProcAttr used: Setpgid %v, Pgid %d, Pdeathsig %v; want true, 0, SIGKILL", got.Setpgid, got.Pgid, got.Pdeathsig)
	}
}

func TestStartCmdOwnsOutput(t *testing.T) {
	cmd := exec.Command(shell(t), "-c", "true")
	cmd.Stdout = os.Stdout
	if _, err := StartCmd("noisy", cmd); err == nil {
		t.Fatal("StartCmd with Stdout set succeeded")
	}
}

func TestStartMissingBinary(t *testing.T) {
	_, err := Start("missing", filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "start missing") {
		t.Fatalf("Start of a missing binary = %v, want an error naming it", err)
	}
}

// A goroutine that exits locked to its thread takes the thread with it, and Linux then
// kills the children that thread forked. Code under test may well do that (network
// namespace helpers do, on purpose), so the children must survive it. Threads are
// retired all through the starts and after them, while the forking goroutines may
// change threads. This catches a start that lets its forking thread go; a forking
// goroutine that merely forgot to lock usually survives it, by staying on its thread in
// waitid.
func TestChildrenSurviveThreadExits(t *testing.T) {
	stop := make(chan struct{})
	var churned sync.WaitGroup
	churned.Add(1)
	go func() {
		defer churned.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			exited := make(chan struct{})
			go func() {
				defer close(exited)
				runtime.LockOSThread()
			}()
			<-exited
		}
	}()
	var children []*Process
	for i := range 10 {
		children = append(children, startShell(t, fmt.Sprintf("sleeper-%d", i), "exec sleep 600"))
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	churned.Wait()
	time.Sleep(200 * time.Millisecond) // for a SIGKILL, if any, to land

	for _, p := range children {
		select {
		case <-p.Exited():
			t.Errorf("%s died when other goroutines' threads exited: %v", p.Name(), p.ExitError())
		default:
		}
	}
}

// The child must not outlive a test binary that dies without stopping it. The child is
// started by a copy of this test binary, which is then killed. The helper's own process
// group does not include the child's, so killing the group does not kill the child
// directly.
func TestChildDiesWithTestBinary(t *testing.T) {
	shell(t)
	t.Setenv(helperEnv, "1")
	helper, err := Start("helper", os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = helper.Kill()
		if t.Failed() {
			t.Logf("helper output:\n%s", helper.Logs())
		}
	}()
	child := readyPID(t, helper)
	if !Alive(child) {
		t.Fatalf("process %d is not running before the helper is killed", child)
	}
	if err := helper.Kill(); err != nil {
		t.Fatal(err)
	}
	waitForDeath(t, child)
}

const helperEnv = "PROCESS_TEST_HELPER"

// TestHelperProcess is not a test: TestChildDiesWithTestBinary runs it in a subprocess,
// where it starts a child, prints its PID and waits to be killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as the subprocess of TestChildDiesWithTestBinary")
	}
	p, err := Start("sleeper", shell(t), "-c", "exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ready %d\n", p.Pid())
	select {}
}

// waitForDeath fails the test unless pid is dead within 10 seconds.
func waitForDeath(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs 10s after it should have died", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOrphaned(t *testing.T) {
	done := exec.Command(shell(t), "-c", "exit 0")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead, alive := done.Process.Pid, os.Getpid()
	for name, want := range map[string]bool{
		fmt.Sprintf("bmt-%d-4-busy", dead):  true,
		fmt.Sprintf("bmt-%d-4-busy", alive): false,
		fmt.Sprintf("bmt-%d", dead):         false,
		"bmt-x-4-busy":                      false,
		"bmt-0-4-busy":                      false,
		fmt.Sprintf("kubepods-%d-4", dead):  false,
	} {
		if got := Orphaned("bmt-", name); got != want {
			t.Errorf("Orphaned(%q, %q) = %v, want %v", "bmt-", name, got, want)
		}
	}
}
