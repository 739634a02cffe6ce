package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// heard is one announcement seen on the wire: a gratuitous ARP request, or an unsolicited
// neighbour advertisement with Override set.
type heard struct {
	at   time.Time
	from string // the sender's MAC
	addr netip.Addr
}

// capture records the announcements that reach a host's interface, read from a packet
// socket inside its namespace.
type capture struct {
	conn *packet.Conn
	done chan struct{}

	mu    sync.Mutex
	heard []heard
	err   error // why reading stopped, unless it was closed
}

// startCapture captures on h's interface until the test ends.
func startCapture(t *testing.T, h *netns.Host) *capture {
	t.Helper()
	c := &capture{done: make(chan struct{})}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(h.Interface)
		if err != nil {
			return err
		}
		c.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capture on %s: %v", h.Label, err)
	}
	go c.read()
	t.Cleanup(func() {
		c.conn.Close()
		<-c.done
	})
	return c
}

func (c *capture) read() {
	defer close(c.done)
	buf := make([]byte, 9000)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if err != nil {
			// Closed, the socket reports os.ErrClosed; anything else ends the capture too,
			// and says why when a wait fails.
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, net.ErrClosed) {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
			}
			return
		}
		if from, addr, ok := announcement(buf[:n]); ok {
			c.mu.Lock()
			c.heard = append(c.heard, heard{time.Now(), from.String(), addr})
			c.mu.Unlock()
		}
	}
}

// of returns when addr was announced by mac, in order.
func (c *capture) of(addr netip.Addr, mac net.HardwareAddr) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at []time.Time
	for _, h := range c.heard {
		if h.addr == addr && h.from == mac.String() {
			at = append(at, h.at)
		}
	}
	return at
}

// announcement reports whether frame announces an address, and which, from which MAC.
// It reads the frames independently of the agent's code that writes them.
func announcement(frame []byte) (net.HardwareAddr, netip.Addr, bool) {
	var f ethernet.Frame
	if f.UnmarshalBinary(frame) != nil {
		return nil, netip.Addr{}, false
	}
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if p.UnmarshalBinary(f.Payload) != nil || p.Operation != arp.OperationRequest || p.SenderIP != p.TargetIP {
			return nil, netip.Addr{}, false
		}
		return p.SenderHardwareAddr, p.SenderIP, bytes.Equal(f.Destination, ethernet.Broadcast)
	case ethernet.EtherTypeIPv6:
		// A fixed header, then ICMPv6 (next header 58).
		ip := f.Payload
		if len(ip) < 40 || ip[6] != 58 {
			return nil, netip.Addr{}, false
		}
		end := 40 + int(binary.BigEndian.Uint16(ip[4:6]))
		if len(ip) < end || netip.AddrFrom16([16]byte(ip[24:40])) != netip.MustParseAddr("ff02::1") {
			return nil, netip.Addr{}, false
		}
		m, err := ndp.ParseMessage(ip[40:end])
		if err != nil {
			return nil, netip.Addr{}, false
		}
		na, ok := m.(*ndp.NeighborAdvertisement)
		if !ok || na.Solicited || !na.Override {
			return nil, netip.Addr{}, false
		}
		return f.Source, na.TargetAddress, true
	}
	return nil, netip.Addr{}, false
}

// TestAnnouncementRefresh checks the refresh on the wire, as the client's interface
// receives it: an agent whose cloud-config sets announcements.refreshInterval to 1 s
// (through a reload) announces its addresses again every second after the announcements
// that followed taking them, and one whose file says off sends nothing after those. Both
// run at once: the quiet one is checked when the other has refreshed several times.
func TestAnnouncementRefresh(t *testing.T) {
	c := newCluster(t, 2)
	node1, node2 := c.Net.Nodes[0], c.Net.Nodes[1]
	const interval = time.Second
	// How far a refresh may be seen from its time: the agent's and this test's goroutines
	// wait for a busy machine's cores.
	const slack = 2 * interval / 5
	const refreshes = 3
	const burst = 4 // announcements on gaining an address: at 0, 0.5, 1 and 2 s

	// node2 reads a file of its own, with the refresh off.
	off := filepath.Join(t.TempDir(), "cloud-config-off.yaml")
	if err := os.WriteFile(off, []byte(cloudConfig+"announcements:\n  refreshInterval: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Agent(node2.Label).Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartAgentWith(node2, off); err != nil {
		t.Fatal(err)
	}
	c.waitReady(t, node2)

	// node1 reloads the testbed's file, now with a refresh every second.
	if err := os.WriteFile(c.Config, []byte(cloudConfig+"announcements:\n  refreshInterval: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.metricValue(t, node1, `baremetal_cloud_config_reloads_total{result="applied"}`) >= 1, nil
	})
	if err != nil {
		t.Fatal("node1's agent did not reload the cloud-config")
	}

	wire := startCapture(t, c.Net.Client)
	quiet := []netip.Addr{netip.MustParseAddr("198.18.0.110"), netip.MustParseAddr("fd00:198:18::110")}
	refreshed := []netip.Addr{vip4, vip6}
	// The quiet addresses first, and their burst over before the others are taken: from
	// then on node2 has had as long as node1 to send a refresh.
	c.setAnnouncer(t, c.createService(t, "quiet", quiet...), node2.Label)
	waitHeard(t, wire, quiet, node2.MAC, burst, 10*time.Second)
	c.setAnnouncer(t, c.createService(t, "refreshed", refreshed...), node1.Label)
	waitHeard(t, wire, refreshed, node1.MAC, burst+refreshes, 10*time.Second)

	for _, addr := range quiet {
		if got := wire.of(addr, node2.MAC); len(got) != burst {
			t.Errorf("%s announced %d times by node2, whose refresh is off, want only the %d on taking it: %v", addr, len(got), burst, offsets(got))
		}
	}
	for _, addr := range refreshed {
		got := wire.of(addr, node1.MAC)
		t.Logf("%s announced by node1 at %v", addr, offsets(got))
		// The first refresh comes after the burst, within an interval of its end.
		if gap := got[burst].Sub(got[burst-1]); gap <= 0 || gap > interval+slack {
			t.Errorf("%s: first refresh %v after the last announcement of the burst, want at most about %v", addr, gap, interval)
		}
		for i := burst + 1; i < len(got); i++ {
			if gap := got[i].Sub(got[i-1]); gap < interval-slack || gap > interval+slack {
				t.Errorf("%s: refreshes %d and %d %v apart, want about %v", addr, i-burst, i-burst+1, gap, interval)
			}
		}
	}

	// Counted apart: the takeover's announcements alone in announcements_total.
	for _, addr := range refreshed {
		f := family(addr)
		if got := c.metric(t, node1, `baremetal_agent_announcements_total{family="`+f+`"}`); got != strconv.Itoa(burst) {
			t.Errorf("node1 counted %s %s announcements, want the %d of the takeover", got, f, burst)
		}
		seen := len(wire.of(addr, node1.MAC)) - burst
		if got := c.metricValue(t, node1, `baremetal_agent_announcement_refreshes_total{family="`+f+`"}`); got < float64(refreshes) || got > float64(seen+1) {
			t.Errorf("node1 counted %v %s refreshes, want the %d or so seen on the wire", got, f, seen)
		}
		if got := c.metric(t, node2, `baremetal_agent_announcement_refreshes_total{family="`+f+`"}`); got != "0" {
			t.Errorf("node2 counted %s %s refreshes, want 0", got, f)
		}
	}
}

// waitHeard waits until each of addrs has been announced n times by mac.
func waitHeard(t *testing.T, wire *capture, addrs []netip.Addr, mac net.HardwareAddr, n int, within time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		for _, a := range addrs {
			if len(wire.of(a, mac)) < n {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, a := range addrs {
			t.Logf("%s announced by %v at %v", a, mac, offsets(wire.of(a, mac)))
		}
		wire.mu.Lock()
		defer wire.mu.Unlock()
		t.Fatalf("not %d announcements of each of %v from %v within %v (capture error: %v)", n, addrs, mac, within, wire.err)
	}
}

// offsets writes times as offsets from the first, for logs.
func offsets(at []time.Time) string {
	if len(at) == 0 {
		return "[]"
	}
	s := "["
	for i, a := range at {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(a.Sub(at[0]).Round(time.Millisecond))
	}
	return s + "]"
}
