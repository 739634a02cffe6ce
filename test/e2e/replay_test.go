package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// captureRequest returns the first ccm probe request that reaches h's interface, as
// anyone who can read the segment records it.
func captureRequest(t *testing.T, h *netns.Host) []byte {
	t.Helper()
	var conn *packet.Conn
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(h.Interface)
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IP, nil)
		return err
	})
	if err != nil {
		t.Fatalf("capture on %s: %v", h.Label, err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 9000)
	for {
		n, _, err := conn.ReadFrom(b)
		if err != nil {
			t.Fatalf("no probe request reached %s: %v", h.Label, err)
		}
		if payload, ok := udpTo(b[:n], 7474); ok && len(payload) == probe.RequestLen && payload[12] == byte(probe.FromCCM) {
			return append([]byte(nil), payload...)
		}
	}
}

// udpTo returns the payload of an Ethernet frame carrying an IPv4 UDP datagram to port.
func udpTo(frame []byte, port uint16) ([]byte, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return nil, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return nil, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != port {
		return nil, false
	}
	return udp[8:min(len(udp), int(binary.BigEndian.Uint16(udp[4:6])))], true
}

// replayRequests plays someone on the layer-2 network without the probe key who recorded
// one of the ccm's requests to the owner, and sends it to the owner at 5,000 a second for
// three seconds: no replay is answered, and the ccm's own probes all are, so no failover.
func (c *cluster) replayRequests(t *testing.T, attacker, owner *netns.Host, svc *corev1.Service) {
	captured := captureRequest(t, owner)
	replayedBefore := c.metricValue(t, owner, `baremetal_agent_probes_total{outcome="replayed"}`)
	changes := c.countEvents(t, svc, "AnnouncerChanged")
	var sent, answers int
	stopWatch := make(chan struct{})
	downs := make(chan string, 1)
	go func() {
		// A node taken for down stays so for at least a probe interval: sampling the
		// status page every 20 ms sees every false down.
		for {
			select {
			case <-stopWatch:
				close(downs)
				return
			case <-time.After(20 * time.Millisecond):
			}
			if st, err := c.Status(context.Background()); err == nil && st.Agent(owner.Label) != "up" {
				select {
				case downs <- st.Agent(owner.Label):
				default:
				}
			}
		}
	}()
	err := attacker.Do(func() error {
		conn, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		to := &net.UDPAddr{IP: owner.IPv4.AsSlice(), Port: 7474}
		start := time.Now()
		for i := range 15000 {
			if _, err := conn.WriteTo(captured, to); err != nil {
				return err
			}
			sent++
			if i%50 == 49 { // 5,000 a second, in bursts of 50 every 10 ms
				time.Sleep(time.Until(start.Add(time.Duration(i+1) * 200 * time.Microsecond)))
			}
		}
		// Whatever answers the owner sent are in the socket by now, or within a moment.
		b := make([]byte, probe.MaxDatagram)
		for {
			if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
				return err
			}
			if _, _, err := conn.ReadFrom(b); errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			} else if err != nil {
				return err
			}
			answers++
		}
	})
	close(stopWatch)
	if err != nil {
		t.Fatal(err)
	}
	if answers != 0 {
		t.Errorf("the owner answered %d of %d replays of one recorded request", answers, sent)
	}
	// Counted, so that an operator sees the attack: most arrive (the kernel may drop some).
	if got := c.metricValue(t, owner, `baremetal_agent_probes_total{outcome="replayed"}`) - replayedBefore; got < float64(sent)/2 {
		t.Errorf("the owner counted %v replayed requests of %d sent", got, sent)
	}
	if state, ok := <-downs; ok {
		t.Errorf("during the replays the ccm took the owner's agent for %s", state)
	}
	if got := c.countEvents(t, svc, "AnnouncerChanged"); got != changes {
		t.Errorf("the announcer changed %d times during the replays", got-changes)
	}
	t.Logf("%d replays of one request sent to %s in %v: none answered, no failover", sent, owner.Label, 3*time.Second)
}
