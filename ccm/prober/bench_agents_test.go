package prober

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// benchAddr is the loopback address of simulated agent i: every 127/8 address is local.
func benchAddr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1) }

// benchIndex returns the agent whose address is a, or -1.
func benchIndex(a net.IP) int {
	a = a.To4()
	if a == nil || a[0] != 127 || a[1] != 1 || a[3] == 0 || a[3] > 250 {
		return -1
	}
	return int(a[2])*250 + int(a[3]) - 1
}

// serveAgents answers probes as n agents, each at its own address, until its input ends.
// A line "stop i" stops agent i, answered by "stopped i <Unix ns>". The agents share one
// socket, read and written in batches, and answer from the address each was probed at:
// a real agent runs on a host of its own, and this process should take as little of
// the prober's machine as it can, so that what is measured is the prober. For the same
// reason a request that waited in the socket longer than the prober's timeout is left
// unanswered: 5,000 real agents never queue behind each other, and this one process,
// answering late answers that no longer count, would stay behind after any burst.
func serveAgents(n, port int) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	responders := make([]*responder.Responder, n)
	for i := range n {
		r, err := responder.New(fmt.Sprintf("node-%d", i), testKey, testVerifier, testInterval, nil)
		if err != nil {
			return fail(err)
		}
		responders[i] = r
	}
	stopped := make([]atomic.Bool, n)
	// What arrived from each prober socket, by its port, and what was answered: to tell
	// a socket whose requests stop arriving from one whose requests go unanswered.
	var fromPort [1 << 16]struct{ datagrams, replies atomic.Uint64 }
	var shed atomic.Uint64
	c, err := net.ListenPacket("udp4", "0.0.0.0:"+strconv.Itoa(port))
	if err != nil {
		return fail(err)
	}
	// Room for the requests of an interval and more: they arrive in bursts.
	_ = c.(*net.UDPConn).SetReadBuffer(readBuffer)
	conn := ipv4.NewPacketConn(c)
	if err := conn.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return fail(err)
	}
	// When each datagram arrived: a request that waited longer than the prober's
	// timeout is dropped unanswered (shed), as its answer would come too late to count.
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return fail(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) }); err != nil || serr != nil {
		return fail(errors.Join(err, serr))
	}
	go func() {
		in := make([]ipv4.Message, 64)
		for i := range in {
			in[i].Buffers = [][]byte{make([]byte, probe.MaxDatagram)}
			in[i].OOB = make([]byte, len(ipv4.NewControlMessage(ipv4.FlagDst))+unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{}))))
		}
		out := make([]ipv4.Message, len(in))
		for i := range out {
			out[i].Buffers = [][]byte{nil}
		}
		for {
			k, err := conn.ReadBatch(in, 0)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			replies, now := 0, time.Now()
			for _, m := range in[:k] {
				dst, arrived, ok := arrival(m.OOB[:m.NN])
				if !ok {
					continue
				}
				i := benchIndex(dst)
				if i < 0 || i >= n || stopped[i].Load() {
					continue
				}
				from := &fromPort[m.Addr.(*net.UDPAddr).Port]
				from.datagrams.Add(1)
				if now.Sub(arrived) > testInterval/4 && !probe.IsVerdict(m.Buffers[0][:m.N]) && !probe.IsDuty(m.Buffers[0][:m.N]) {
					shed.Add(1)
					continue
				}
				o := &out[replies]
				b, ok := responders[i].Handle(m.Buffers[0][:m.N], o.Buffers[0][:0])
				if !ok {
					continue
				}
				from.replies.Add(1)
				o.Buffers[0], o.Addr = b, m.Addr
				o.OOB = (&ipv4.ControlMessage{Src: dst}).Marshal()
				replies++
			}
			for sent := 0; sent < replies; {
				w, err := conn.WriteBatch(out[sent:replies], 0)
				if err != nil {
					sent++ // that reply is lost, as it would be on a network
					continue
				}
				sent += w
			}
		}
	}()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "stats" {
			fmt.Println(agentStats(responders, fromPort[:]) + fmt.Sprintf("; %d requests shed", shed.Load()))
			continue
		}
		var i int
		if _, err := fmt.Sscanf(in.Text(), "stop %d", &i); err == nil && i < n {
			stopped[i].Store(true)
			fmt.Printf("stopped %d %d\n", i, time.Now().UnixNano())
		}
	}
	return 0
}

// arrival returns the address a datagram was sent to, and when it arrived, from its
// control messages.
func arrival(oob []byte) (dst net.IP, at time.Time, ok bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, time.Time{}, false
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&m.Data[0]))
			dst = net.IP(info.Addr[:]).To4()
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})):
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			at = time.Unix(ts.Unix())
		}
	}
	return dst, at, dst != nil && !at.IsZero()
}

// agentStats says what the simulated agents took and answered, in all and from each
// port, on one line.
func agentStats(responders []*responder.Responder, fromPort []struct{ datagrams, replies atomic.Uint64 }) string {
	var sum responder.Stats
	for _, r := range responders {
		st := r.Stats()
		sum.Requests += st.Requests
		sum.Replies += st.Replies
		sum.Malformed += st.Malformed
		sum.Unauthenticated += st.Unauthenticated
		sum.Misdirected += st.Misdirected
		sum.Replayed += st.Replayed
		sum.Limited += st.Limited
		sum.Verdicts += st.Verdicts
		sum.StaleVerdicts += st.StaleVerdicts
	}
	line := fmt.Sprintf("stats %+v", sum)
	for port := range fromPort {
		if d := fromPort[port].datagrams.Load(); d > 0 {
			line += fmt.Sprintf("; from port %d: %d datagrams, %d answered", port, d, fromPort[port].replies.Load())
		}
	}
	return line
}

// agents is the process of the simulated agents.
type agents struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	stopped chan time.Time
	stats   chan string
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
		// The end of its input ends it (and its profile); killed if it does not.
		in.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	a := &agents{cmd: cmd, in: in, stopped: make(chan time.Time, 1), stats: make(chan string, 1)}
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
			if strings.HasPrefix(lines.Text(), "stats ") {
				a.stats <- lines.Text()
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

// statistics returns what the simulated agents took and answered so far.
func (a *agents) statistics() string {
	fmt.Fprintln(a.in, "stats")
	select {
	case s := <-a.stats:
		return s
	case <-time.After(10 * time.Second):
		return "the simulated agents did not say"
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

// cpuTime is the CPU this process has used: in its own code (user) and in the kernel
// for it (system), which on loopback includes delivering its datagrams to the receiving
// sockets.
func cpuTime() (user, system time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
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
