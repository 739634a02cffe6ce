package e2e

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

// metricValue returns a counter of a node agent's /metrics as a number, 0 when absent.
func (c *cluster) metricValue(t testing.TB, h *netns.Host, sample string) float64 {
	t.Helper()
	v, _ := strconv.ParseFloat(c.metric(t, h, sample), 64)
	return v
}

// sendFrom sends each datagram from an ephemeral port of h to port 7474 of every node.
func (c *cluster) sendFrom(t testing.TB, h *netns.Host, datagrams ...[]byte) {
	t.Helper()
	err := h.Do(func() error {
		conn, err := net.ListenPacket("udp", ":0")
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, n := range c.Net.Nodes {
			for _, d := range datagrams {
				if _, err := conn.WriteTo(d, &net.UDPAddr{IP: n.IPv4.AsSlice(), Port: 7474}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestForgedProbes plays someone on the layer-2 network without the probe key: forged and
// replayed verdicts do not make an agent give up a live node's addresses, a recorded
// request replayed at 5,000 a second is never answered and starves no probe, and a dead
// node's address taken over to answer the ccm's probes with forged or replayed replies
// does not keep the node up.
func TestForgedProbes(t *testing.T) {
	c := newCluster(t, 2)
	c.startCCM(t)
	svc, addrs := c.createLBService(t, "forged")
	c.waitSettled(t)
	plan := c.plan(t, svc)
	owner, standby := c.Node(plan[0]), plan[1]
	c.waitSteady(t, addrs[0], owner.Label)
	attacker := c.Net.Client
	_, otherKey, err := testbed.WriteProbeKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("verdicts", func(t *testing.T) {
		counts := func() (unauth, stale, taken float64) {
			return c.metricValue(t, owner, `baremetal_agent_probes_total{outcome="unauthenticated"}`),
				c.metricValue(t, owner, `baremetal_agent_verdicts_total{result="stale"}`),
				c.metricValue(t, owner, `baremetal_agent_verdicts_total{result="taken"}`)
		}
		unauth, stale, taken := counts()
		forged, err := otherKey.AppendVerdict(c.Signer, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: ^uint64(0), Seq: 1}, Down: []string{owner.Label}})
		if err != nil {
			t.Fatal(err)
		}
		// An authentic verdict older than the one the agents hold stands for a replayed
		// one: whoever has no key can only send what a ccm sent before.
		replayed, err := c.Key.AppendVerdict(c.Signer, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: 1, Seq: 1}, Down: []string{owner.Label}})
		if err != nil {
			t.Fatal(err)
		}
		c.sendFrom(t, attacker, forged[0], replayed[0])
		// Known state first: the agent has handled both, whatever it made of them.
		var u, st, tk float64
		err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			u, st, tk = counts()
			return u > unauth && st+tk > stale+taken, nil
		})
		if err != nil {
			t.Fatal("the owner's agent did not receive the forged and the replayed verdict")
		}
		if tk > taken {
			t.Errorf("the owner's agent took %v verdicts from the impostor", tk-taken)
		}
		if got := c.metric(t, owner, "baremetal_agent_down_nodes"); got != "0" {
			t.Errorf("%s takes %s nodes for down after the forged verdicts, want 0", owner.Label, got)
		}
		c.waitSteady(t, addrs[0], owner.Label)
	})

	t.Run("root on a node", func(t *testing.T) {
		c.rootOnANode(t, attacker, owner, standby)
		c.waitSteady(t, addrs[0], owner.Label)
	})

	t.Run("replayed requests", func(t *testing.T) {
		c.replayRequests(t, attacker, owner, svc)
		c.waitSteady(t, addrs[0], owner.Label)
	})

	t.Run("replies", func(t *testing.T) {
		// Genuine replies of the owner, as someone listening on the segment would record
		// them; the test makes them with the key it has, since it cannot sniff.
		var recorded [][]byte
		for nonce := range uint64(5) {
			reply, err := c.Key.AppendReply(nil, probe.Reply{Nonce: nonce + 1000, State: probe.Ready, Node: owner.Label})
			if err != nil {
				t.Fatal(err)
			}
			recorded = append(recorded, reply)
		}
		died := time.Now()
		if err := owner.SetLink(false); err != nil {
			t.Fatal(err)
		}
		// The attacker takes the dead node's address, so that the ccm's probes reach it,
		// and answers each with a reply forged without the key and a replayed one.
		if _, err := attacker.Run(context.Background(), "ip", "addr", "add", netip.PrefixFrom(owner.IPv4, 32).String(), "dev", attacker.Interface); err != nil {
			t.Fatal(err)
		}
		if err := c.Net.Bridge.FlushNeighbors(); err != nil {
			t.Fatal(err)
		}
		var answered atomic.Int64
		var conn net.PacketConn
		err := attacker.Do(func() (err error) {
			conn, err = net.ListenPacket("udp", netip.AddrPortFrom(owner.IPv4, 7474).String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			b := make([]byte, probe.MaxDatagram)
			for i := 0; ; i++ {
				n, from, err := conn.ReadFrom(b)
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil || n < 12 {
					continue
				}
				nonce := uint64(0)
				for _, x := range b[4:12] {
					nonce = nonce<<8 | uint64(x)
				}
				forged, _ := otherKey.AppendReply(nil, probe.Reply{Nonce: nonce, State: probe.Ready, Node: owner.Label})
				// Counted once both have left: an answer that never went out tests nothing.
				_, errForged := conn.WriteTo(forged, from)
				_, errReplayed := conn.WriteTo(recorded[i%len(recorded)], from)
				if errForged == nil && errReplayed == nil {
					answered.Add(1)
				}
			}
		}()
		l := c.startClient(addrs[0])
		waitSwitched(t, l, died, standby)
		l.Stop()
		// Kept answering, the impostor must not bring the node back: the ccm takes three
		// good answers in a row for that, a tenth of a second.
		st, err := c.WaitStatus(context.Background(), 5*time.Second, func(st *testbed.Status) (bool, string) {
			if answered.Load() < 20 {
				return false, "the impostor answered " + strconv.FormatInt(answered.Load(), 10) + " probes"
			}
			return true, ""
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Agent(owner.Label); got != "down" {
			t.Errorf("agent of %s is %q after %d forged and replayed answers, want down", owner.Label, got, answered.Load())
		}
		if got := c.announcer(t, svc); got != standby {
			t.Errorf("announcer %s, want %s", got, standby)
		}
		t.Logf("the impostor answered %d probes of the dead %s; %s announces", answered.Load(), owner.Label, standby)
	})
}

// rootOnANode plays root on a node: it holds the probe key, and learns the ccm's instance,
// its verdict's sequence and the owner's duty digest from a request it sees. Its verdict
// naming the owner and the standby down, and its duty list for the owner, are all the
// ccm's but for the signature: the owner must take neither, and count both as unsigned.
func (c *cluster) rootOnANode(t *testing.T, from, owner *netns.Host, standby string) {
	t.Helper()
	req, err := c.Key.ParseRequest(captureRequest(t, owner))
	if err != nil {
		t.Fatal(err)
	}
	_, _, rogue, err := testbed.WriteVerdictKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	verdict, err := c.Key.AppendVerdict(rogue, probe.Verdict{VerdictRef: probe.VerdictRef{Instance: req.Instance, Seq: req.Verdict + 100}, Down: []string{owner.Label, standby}})
	if err != nil {
		t.Fatal(err)
	}
	duty, err := c.Key.AppendDuty(rogue, probe.Duty{Instance: req.Instance, Seq: 1 << 62, To: probe.NodeTag(owner.Label), Digest: req.Duty})
	if err != nil {
		t.Fatal(err)
	}
	unsigned := func() float64 { return c.metricValue(t, owner, "baremetal_agent_unsigned_datagrams_total") }
	taken := func() float64 { return c.metricValue(t, owner, `baremetal_agent_verdicts_total{result="taken"}`) }
	before, takenBefore := unsigned(), taken()
	c.sendFrom(t, from, append(verdict, duty...)...)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return unsigned() >= before+2, nil
	})
	if err != nil {
		t.Fatalf("the owner's agent counted %v unsigned datagrams of the 2 sent", unsigned()-before)
	}
	if got := taken(); got != takenBefore {
		t.Errorf("the owner's agent took %v verdicts signed by another key", got-takenBefore)
	}
	if got := c.metric(t, owner, "baremetal_agent_down_nodes"); got != "0" {
		t.Errorf("%s takes %s nodes for down after a verdict signed by another key, want 0", owner.Label, got)
	}
}
