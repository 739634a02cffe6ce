package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

// wireBenchConfig has a pool of 5,120 addresses announced on eth0, and the wire check at
// its default interval.
const wireBenchConfig = `
pools:
- name: bulk
  addresses: [198.18.16.0/20, 198.18.32.0/22]
  interfaces: [eth0]
`

const (
	// wireBenchAddresses is how many addresses node2 backs and checks.
	wireBenchAddresses = 5000
	// wireBenchPerService is how many of them each Service holds.
	wireBenchPerService = 50
	// wireWindow is how long BenchmarkWireCheck measures: three rounds of the default
	// check interval.
	wireWindow = 60 * time.Second
)

// BenchmarkWireCheck measures what the wire check costs in steady state: node1 announces
// 5,000 addresses and node2 backs them all, so node2 asks for each once per
// announcements.checkInterval (20 s) and node1 answers. It prints the requests node2 sends
// and the replies node1 sends per second (the frames the check puts on the segment), and
// both agents' CPU in millicores, over wireWindow. Run it with -benchtime=1x (make
// bench-wire).
func BenchmarkWireCheck(b *testing.B) {
	for b.Loop() {
		c := newClusterWith(b, controlplane.Shared(b), 2, wireBenchConfig)
		node1, node2 := c.Net.Nodes[0], c.Net.Nodes[1]
		ctx := context.Background()
		ns := c.namespace(b)
		next := netip.MustParseAddr("198.18.16.0")
		for i := 0; i < wireBenchAddresses/wireBenchPerService; i++ {
			svc := testbed.ServiceFor(ns, fmt.Sprintf("wire-%d", i), "wire")
			svc.Annotations[annotation.Announcer] = node1.Label
			svc.Annotations[annotation.Standbys] = node2.Label
			svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for range wireBenchPerService {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: next.String()})
				next = next.Next()
			}
			if _, err := c.Admin.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		sample := func(h *netns.Host, name string) float64 {
			v, _ := strconv.ParseFloat(c.metric(b, h, name), 64)
			return v
		}
		checked := func() float64 {
			return sample(node2, `baremetal_agent_wire_checks_total{family="IPv4",outcome="Answered"}`) +
				sample(node2, `baremetal_agent_wire_checks_total{family="IPv4",outcome="Unanswered"}`) +
				sample(node2, `baremetal_agent_wire_checks_total{family="IPv4",outcome="Blind"}`)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for sample(node1, `baremetal_agent_owned_addresses{family="IPv4"}`) < wireBenchAddresses || sample(node2, "baremetal_agent_wire_checked_addresses") < wireBenchAddresses {
			if time.Now().After(deadline) {
				b.Fatalf("node1 owns %v addresses and node2 checks %v, want %d each", sample(node1, `baremetal_agent_owned_addresses{family="IPv4"}`), sample(node2, "baremetal_agent_wire_checked_addresses"), wireBenchAddresses)
			}
			time.Sleep(time.Second) // polls
		}
		// The first round of every address starts within an interval of the Set.
		time.Sleep(20 * time.Second)
		cpu1, cpu2 := c.agentCPU(b, node1.Label), c.agentCPU(b, node2.Label)
		asked, replied := checked(), sample(node1, `baremetal_agent_replies_total{family="IPv4"}`)
		start := time.Now()
		time.Sleep(wireWindow) // the window measured
		elapsed := time.Since(start)
		perSecond := func(d float64) float64 { return d / elapsed.Seconds() }
		millicores := func(d time.Duration) float64 { return float64(d) / float64(elapsed) * 1000 }
		unanswered := sample(node2, `baremetal_agent_wire_checks_total{family="IPv4",outcome="Unanswered"}`)
		fmt.Fprintf(os.Stdout, "\nwire check of %d addresses, default interval, over %v\n", wireBenchAddresses, wireWindow)
		fmt.Fprintf(os.Stdout, "  requests node2 sent: %.0f/s (each address once per interval; plus node1's own address once a round)\n", perSecond(checked()-asked))
		fmt.Fprintf(os.Stdout, "  replies node1 sent: %.0f/s\n", perSecond(sample(node1, `baremetal_agent_replies_total{family="IPv4"}`)-replied))
		fmt.Fprintf(os.Stdout, "  node2 agent (checker): %.1f millicores\n", millicores(c.agentCPU(b, node2.Label)-cpu2))
		fmt.Fprintf(os.Stdout, "  node1 agent (announcer): %.1f millicores\n", millicores(c.agentCPU(b, node1.Label)-cpu1))
		fmt.Fprintf(os.Stdout, "  rounds unanswered: %.0f\n", unanswered)
		b.ReportMetric(perSecond(checked()-asked), "requests/s")
		b.ReportMetric(millicores(c.agentCPU(b, node2.Label)-cpu2), "checker-millicores")
	}
}
