package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/pods"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// The data path of these tests is a cluster's: the client resolves a Service address to
// the announcer's MAC, the announcer's kube-proxy hands the connection to a pod, and the
// pod names itself, its node and the client address it saw.

// TestLocalTraffic: a Local Service whose pods run on node1 and node3 is announced by one
// of them; its pod sees the client's own address on both families; kube-proxy's health
// check node port says which nodes have a local pod; and when the announcer's pod turns
// unready, the announcer moves within a second of the EndpointSlice saying so, and the
// client is served by the other pod.
func TestLocalTraffic(t *testing.T) {
	c := newCluster(t, 3)
	c.startCCM(t)
	a, b, cNode := c.Net.Nodes[0], c.Net.Nodes[1], c.Net.Nodes[2]
	svc, addrs := c.createLBServiceFor(t, "local", []*netns.Host{a, cNode}, func(*corev1.Service) {})
	announcer := c.announcer(t, svc)
	if announcer != a.Label && announcer != cNode.Label {
		t.Fatalf("announcer %s: want %s or %s, the nodes with the Service's pods", announcer, a.Label, cNode.Label)
	}
	for _, addr := range addrs {
		c.waitSteady(t, addr, announcer)
		got := c.ask(t, addr)
		client := c.Net.Client.IPv4
		if addr.Is6() {
			client = c.Net.Client.IPv6
		}
		if got.Node != announcer || got.Client != client {
			t.Errorf("%s answered by %s: want a pod on %s that saw the client's own address %s", addr, got, announcer, client)
		}
	}

	// kube-proxy answers the health check node port with the node's local endpoints:
	// what an external load balancer in front of the nodes would ask.
	svc, err := c.Admin.CoreV1().Services(svc.Namespace).Get(context.Background(), svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := svc.Spec.HealthCheckNodePort
	if port == 0 {
		t.Fatal("the Local Service has no healthCheckNodePort")
	}
	for _, h := range c.Net.Nodes {
		want := http.StatusOK
		if h == b {
			want = http.StatusServiceUnavailable
		}
		if code, body := c.healthCheck(t, h, port); code != want {
			t.Errorf("health check node port %d of %s: %d %s, want %d", port, h.Label, code, body, want)
		}
	}

	// The announcer's pod turns unready: the other node with a pod takes the addresses.
	other := a
	if announcer == a.Label {
		other = cNode
	}
	l := c.startClient(addrs[0])
	defer l.Stop()
	time.Sleep(200 * time.Millisecond) // paces the open-loop client
	pod := c.podOn(t, svc, announcer)
	unready := time.Now()
	if err := pod.SetReady(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	sliceSaid, moved := c.waitUnreadyMoves(t, svc, announcer)
	t.Logf("pod unready at %s; the EndpointSlice said so %v later, the announcer moved %v after that",
		unready.Format("15:04:05.000"), sliceSaid.Sub(unready).Round(time.Millisecond), moved.Sub(sliceSaid).Round(time.Millisecond))
	if moved.Sub(sliceSaid) > time.Second {
		t.Errorf("the announcer moved %v after the EndpointSlice said its pod was unready, want within 1 s", moved.Sub(sliceSaid))
	}
	if got := c.announcer(t, svc); got != other.Label {
		t.Errorf("announcer after the pod on %s turned unready: %s, want %s", announcer, got, other.Label)
	}
	waitSwitched(t, l, unready, other.Label)
	outage, _, recovered := traffic.Outage(l.Stop(), unready)
	if !recovered {
		t.Fatal("the client was not served again after the announcer's pod turned unready")
	}
	t.Logf("outage seen by the client: %v", outage.Round(time.Millisecond))
}

// TestClusterTraffic: a Cluster Service whose only pod runs on node3, which is excluded
// from load balancers, is announced by node1 and reached through it: node1's kube-proxy
// hands the connection to node3's pod, with node1's address as the source.
func TestClusterTraffic(t *testing.T) {
	c := newCluster(t, 3)
	a, cNode := c.Net.Nodes[0], c.Net.Nodes[2]
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, corev1.LabelNodeExcludeBalancers)
	if _, err := c.Admin.CoreV1().Nodes().Patch(context.Background(), cNode.Label, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.startCCM(t)
	_, addrs := c.createLBServiceFor(t, "cluster", []*netns.Host{cNode}, func(svc *corev1.Service) {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		svc.Annotations[annotation.PreferredNodes] = a.Label
	})
	for _, addr := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		got, err := traffic.AskUntil(ctx, c.Net.Client.Dial, netip.AddrPortFrom(addr, servicePort), time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		via := a.IPv4
		if addr.Is6() {
			via = a.IPv6
		}
		if got.Node != cNode.Label || got.Client != via {
			t.Errorf("%s answered by %s: want the pod on %s, reached through %s (%s)", addr, got, cNode.Label, a.Label, via)
		}
		if mac, _, _ := c.Net.Client.Neighbor(addr); mac.String() != a.MAC.String() {
			t.Errorf("the client resolves %s to %v, want %s's %s", addr, mac, a.Label, a.MAC)
		}
	}
}

// ask asks addr from the client which pod answers.
func (c *cluster) ask(t testing.TB, addr netip.Addr) traffic.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := traffic.Ask(ctx, c.Net.Client.Dial, netip.AddrPortFrom(addr, servicePort))
	if err != nil {
		t.Fatalf("ask %s: %v", addr, err)
	}
	return got
}

// healthCheck gets kube-proxy's health check node port of h from the client.
func (c *cluster) healthCheck(t testing.TB, h *netns.Host, port int32) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: c.Net.Client.Dial, DisableKeepAlives: true}}
	code, body, err := install.Get(ctx, client, "http://"+netip.AddrPortFrom(h.IPv4, uint16(port)).String()+"/")
	if err != nil {
		t.Fatalf("health check node port of %s: %v", h.Label, err)
	}
	return code, strings.TrimSpace(body)
}

// podOn returns the pod of the Service's app on node.
func (c *cluster) podOn(t testing.TB, svc *corev1.Service, node string) *pods.Pod {
	t.Helper()
	for _, p := range c.Pods() {
		if p.Namespace == svc.Namespace && p.Node.Label == node {
			return p
		}
	}
	t.Fatalf("no pod of %s/%s on %s", svc.Namespace, svc.Name, node)
	return nil
}

// waitUnreadyMoves waits until the Service's EndpointSlices say its endpoint on node is not
// ready, and the announcer is another node; it returns when it saw each.
func (c *cluster) waitUnreadyMoves(t testing.TB, svc *corev1.Service, node string) (sliceSaid, moved time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for sliceSaid.IsZero() || moved.IsZero() {
		if ctx.Err() != nil {
			t.Fatalf("10 s after the pod on %s turned unready: EndpointSlice said so at %v, announcer moved at %v", node, sliceSaid, moved)
		}
		if sliceSaid.IsZero() && !c.endpointReady(ctx, svc, node) {
			sliceSaid = time.Now()
		}
		if moved.IsZero() {
			if got, err := c.Admin.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
				if r, _ := annotation.Parse(got); r.Announcer != node {
					moved = time.Now()
				}
			}
		}
		time.Sleep(5 * time.Millisecond) // polls the API server
	}
	return sliceSaid, moved
}

// endpointReady reports whether an EndpointSlice of svc lists a ready endpoint on node.
func (c *cluster) endpointReady(ctx context.Context, svc *corev1.Service, node string) bool {
	slices, err := c.Admin.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return true // not known to have changed
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName == node && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}
