// Package process starts child processes for tests, such as etcd, kube-apiserver or the
// project's own binaries, so that they cannot outlive the test binary that started them.
// Each child runs in a process group of its own, gets SIGKILL when the test binary dies,
// and has its output kept for the test to print when it fails.
package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/logs"
)

// waitDelay bounds how long a Process keeps reading output after its child has exited,
// in case something the child started still holds the pipe.
const waitDelay = 5 * time.Second

// A Process is a running or exited child process and everything it printed. Its methods
// are safe for concurrent use.
type Process struct {
	name string
	pid  int
	cmd  *exec.Cmd
	log  logs.Buffer

	exited  chan struct{} // closed once the child has exited and been reaped
	waitErr error         // what cmd.Wait returned; read only after exited is closed
}

// Start starts the program at path with args, under name for logs and errors, as
// StartCmd does.
func Start(name, path string, args ...string) (*Process, error) {
	return StartCmd(name, exec.Command(path, args...))
}

// StartCmd starts cmd, a command prepared by the caller with the environment, working
// directory, extra files or namespaces the child needs, under name for logs and errors.
// The child's stdout and stderr go to one log, read with Logs and Tail, so cmd.Stdout
// and cmd.Stderr must be nil. cmd.SysProcAttr, if set, is copied and its fields kept,
// except that the child always gets Pdeathsig SIGKILL and a process group of its own
// (Setpgid, unless Setsid already makes it a session and group leader). cmd belongs to
// the Process from then on: the caller must not call its Wait or signal it.
//
// The child gets SIGKILL when its parent dies, so that a test binary that panics, times
// out or is killed leaves no child behind. Linux sends that signal when the parent
// *thread* exits, not the process (prctl(2), PR_SET_PDEATHSIG), and the Go runtime does
// end threads: a goroutine that exits locked by runtime.LockOSThread takes its thread
// with it. An unlocked goroutine may move off the thread it forked from, leaving that
// thread to be locked and ended by any other goroutine. So the child is forked from a
// goroutine that locks its thread, which no other goroutine can then use, and that
// goroutine holds it until it has reaped the child. It then returns still locked, so the
// runtime ends the thread instead of reusing it; the child is gone by then. Each running
// child therefore holds one OS thread.
//
// The process group of its own lets Stop and Kill reach anything the child started, and
// keeps a Ctrl-C meant for go test from reaching the child other than through its
// parent's death.
func StartCmd(name string, cmd *exec.Cmd) (*Process, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, fmt.Errorf("start %s: Stdout and Stderr must be nil: the output goes to the log", name)
	}
	p := &Process{
		name:   name,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	cmd.Stdout = &p.log
	cmd.Stderr = &p.log

	var attr syscall.SysProcAttr
	if cmd.SysProcAttr != nil {
		attr = *cmd.SysProcAttr
	}
	attr.Pdeathsig = syscall.SIGKILL
	// A session leader is the leader of a new process group already, and setpgid fails
	// for it.
	attr.Setpgid = !attr.Setsid
	attr.Pgid = 0
	cmd.SysProcAttr = &attr
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = waitDelay
	}

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see the doc comment.
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// PeakRSS returns the peak resident set size of the running child, in bytes: VmHWM of
// /proc/<pid>/status.
func (p *Process) PeakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", p.pid)
}

// Name returns the name the Process was started under.
func (p *Process) Name() string { return p.name }

// Pid returns the child's process ID, which is also the ID of its process group.
func (p *Process) Pid() int { return p.pid }

// Exited returns a channel that is closed once the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitError returns how the child exited, as exec.Cmd.Wait does: nil for exit status 0,
// or an error such as an *exec.ExitError. Call it after Exited is closed: before that
// it returns an error saying that the child is still running.
func (p *Process) ExitError() error {
	if !p.hasExited() {
		return fmt.Errorf("%s is still running", p.name)
	}
	return p.waitErr
}

// Stop sends SIGTERM to the child and waits up to grace for it to exit, then kills its
// process group with SIGKILL and waits until it has been reaped. It returns an error
// when the child had already exited on its own, or had to be killed.
func (p *Process) Stop(grace time.Duration) error {
	if p.hasExited() {
		return fmt.Errorf("%s had exited before it was stopped: %s", p.name, p.exitStatus())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("send SIGTERM to %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.name, grace)
}

// Kill sends SIGKILL to the child's whole process group and waits until the child has
// been reaped. It returns nil also when the child had already exited, and then sends no
// signal.
func (p *Process) Kill() error {
	if p.hasExited() {
		return nil
	}
	// Negative PID: the whole process group, in case the child started any of its own.
	// ESRCH means there was no group left to kill.
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send SIGKILL to the process group of %s: %w", p.name, err)
	}
	// The child itself too, should it have left its group, as setpgid(2) allows.
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("send SIGKILL to %s: %w", p.name, err)
	}
	<-p.exited
	return nil
}

// Logs returns everything the child has printed so far, stdout and stderr interleaved.
func (p *Process) Logs() string { return p.log.String() }

// Tail returns the last n lines the child has printed so far, without the final
// newline.
func (p *Process) Tail(n int) string { return p.log.Tail(n) }

func (p *Process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitStatus describes how the child exited, "exit status 0" included.
func (p *Process) exitStatus() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Alive reports whether pid is a process that has not exited. One that is gone, or a
// zombie waiting for its parent to reap it, counts as dead: tests use it to check that
// nothing they started outlives them.
func Alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain any.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	fields := strings.Fields(rest)
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// userHZ is the unit of the CPU times of /proc/<pid>/stat: USER_HZ, 100 on every
// architecture Linux runs on today.
const userHZ = 100

// CPUTime returns the CPU time pid has used so far, in user and kernel mode, all its
// threads added up, at the 10 ms granularity of /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	// After the command name: state is field 3 of stat(5), utime 14, stime 15.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("CPU time of process %d: /proc/%d/stat has %d fields after the command", pid, pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// Orphaned reports whether name, of something a test made outside its process (a network
// namespace, a cgroup) and named prefix, the creator's pid, a dash and the rest, was made
// by a process no longer alive: nothing else will remove it. A name not made so is not.
func Orphaned(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(digits)
	return err == nil && pid > 0 && !Alive(pid)
}
