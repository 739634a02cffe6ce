package prober

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// benchAddr is the loopback address of simulated agent i: every 127/8 address is local.
func benchAddr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// serveAgents answers probes as n agents, each on its own address, until its input ends.
// A line "stop i" stops agent i, answered by "stopped i <Unix ns>".
func serveAgents(n, port int) int {
	conns := make([]net.PacketConn, n)
	for i := range n {
		c, err := net.ListenPacket("udp", benchAddr(i)+":"+strconv.Itoa(port))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		r, err := probe.NewResponder(fmt.Sprintf("node-%d", i), testKey)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conns[i] = c
		go r.Serve(c)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var i int
		if _, err := fmt.Sscanf(in.Text(), "stop %d", &i); err == nil && i < n {
			conns[i].Close()
			fmt.Printf("stopped %d %d\n", i, time.Now().UnixNano())
		}
	}
	return 0
}

// agents is the process of the simulated agents.
type agents struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	stopped chan time.Time
}

func startAgents(b *testing.B, n, port int) *agents {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchRole+"=agents", "PROBER_BENCH_N="+strconv.Itoa(n), "PROBER_BENCH_PORT="+strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	a := &agents{cmd: cmd, in: in, stopped: make(chan time.Time, 1)}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		b.Fatalf("the simulated agents did not start: %q", lines.Text())
	}
	go func() {
		for lines.Scan() {
			var i int
			var ns int64
			if _, err := fmt.Sscanf(lines.Text(), "stopped %d %d", &i, &ns); err == nil {
				a.stopped <- time.Unix(0, ns)
			}
		}
	}()
	return a
}

// stop stops agent i and returns when it stopped.
func (a *agents) stop(b *testing.B, i int) time.Time {
	fmt.Fprintf(a.in, "stop %d\n", i)
	select {
	case t := <-a.stopped:
		return t
	case <-time.After(30 * time.Second):
		b.Fatalf("agent %d did not stop", i)
		return time.Time{}
	}
}

// spin keeps a core busy in a process of its own until the benchmark ends.
func spin(b *testing.B) (stop func()) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchRole+"=spin")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	b.Cleanup(stop)
	return stop
}

// cpuTime is the CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU process pid has used, from /proc.
func procCPU(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which ends with the last ')': utime and stime are the
	// 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
