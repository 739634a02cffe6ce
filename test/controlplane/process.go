package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child (etcd or kube-apiserver) and everything it printed.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *logBuffer

	exited  chan struct{} // closed once the child has exited and been reaped
	waitErr error         // what cmd.Wait returned; read only after exited is closed
}

// startProcess starts the binary at path with args, its stdout and stderr going to one
// log buffer.
//
// The child gets SIGKILL when its parent dies, so that a test binary that panics, times
// out or is killed leaves no etcd or kube-apiserver behind. Linux sends that signal when
// the parent *thread* exits, not the process (prctl(2), PR_SET_PDEATHSIG), and the Go
// runtime does end threads: a goroutine that exits locked by runtime.LockOSThread takes
// its thread with it. An unlocked goroutine may move off the thread it forked from,
// leaving that thread to be locked and ended by any other goroutine. So the child is
// forked from a goroutine that locks its thread, which no other goroutine can then use,
// and that goroutine holds it until it has reaped the child. It then returns still
// locked, so the runtime ends the thread instead of reusing it; the child is gone by then.
func startProcess(name, path string, args ...string) (*process, error) {
	p := &process{
		name:   name,
		cmd:    exec.Command(path, args...),
		log:    &logBuffer{},
		exited: make(chan struct{}),
	}
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL,
		// A process group of its own, so that the last-resort SIGKILL in stop reaches
		// anything the child started, and a Ctrl-C meant for go test reaches the child
		// only through its parent's death.
		Setpgid: true,
	}
	// Bounds how long Wait keeps reading output after the child has exited, in case
	// something it started still holds the pipe.
	p.cmd.WaitDelay = 5 * time.Second

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see the doc comment.
		if err := p.cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", name, err)
			return
		}
		started <- nil
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// pid returns the child's process ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// hasExited reports whether the child has exited.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitError describes how the child exited; call it only after it has.
func (p *process) exitError() error {
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// stop sends SIGTERM and waits up to grace for the child to exit, then kills its process
// group. It returns an error when the child had already exited on its own, or had to be
// killed.
func (p *process) stop(grace time.Duration) error {
	if p.hasExited() {
		return fmt.Errorf("%s had exited before it was stopped: %v", p.name, p.exitError())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send SIGTERM to %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
	}
	// Negative PID: the whole process group, in case the child started any of its own.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.name, grace)
}

// logBuffer collects a child's output. exec.Cmd copies into it from its own goroutine
// while tests may read it, hence the lock.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(data)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n lines of the log.
func (b *logBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
