// Package e2e runs the project's binaries on network namespaces: nodes on a bridge, each
// with the real agent, a client namespace whose own kernel resolves and connects to
// Service addresses, and the real control plane. It needs root; outside CI it skips
// without.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/traffic"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// cloudConfig has one pool inside the test network, so that the nodes' eth0 is the
// interface its addresses are announced on. 198.18.0.180 is in the subnet but in no pool.
// Pool late is on no node's subnet until a test adds one.
const cloudConfig = `
pools:
- name: e2e
  addresses: [198.18.0.100-198.18.0.150, "fd00:198:18::100-fd00:198:18::150"]
- name: late
  addresses: [198.19.5.0/24]
  autoAssign: false
`

// servicePort is where every node's test server listens, standing in for kube-proxy
// handing the Service's traffic to a pod.
const servicePort = 8080

// cluster is a test's network, control plane objects and running agents.
type cluster struct {
	net    *netns.Network
	cp     *controlplane.ControlPlane
	admin  kubernetes.Interface
	agents map[string]*process.Process
	dir    string
	config string // the cloud-config of agents and ccm

	api             netip.AddrPort // the API server, as the namespaces reach it
	apiServerName   string         // the name its certificate has
	agentKubeconfig string
	agentBinary     string
}

// newCluster builds a network of n nodes, registers them as Nodes, runs a test server and
// the agent on each, and cleans everything up when the test ends.
func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	return newClusterOn(t, controlplane.Shared(t), n)
}

// newClusterOn is newCluster on a given control plane.
func newClusterOn(t testing.TB, cp *controlplane.ControlPlane, n int) *cluster {
	t.Helper()
	network := netns.ForTest(t, n)
	ctx := context.Background()
	c := &cluster{net: network, cp: cp, agents: map[string]*process.Process{}, dir: t.TempDir()}
	var err error
	if c.admin, err = kubernetes.NewForConfig(cp.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	manifests, err := install.ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := install.Apply(ctx, cp.AdminConfig(), manifests); err != nil {
		t.Fatal(err)
	}
	// The agents run with the agent's ServiceAccount from the manifests, so a missing RBAC
	// rule fails here; they reach the API server through a forwarder on the bridge.
	sa, err := cp.ServiceAccountConfig(ctx, "baremetal-system", "baremetal-agent")
	if err != nil {
		t.Fatal(err)
	}
	apiHost := strings.TrimPrefix(sa.Host, "https://")
	if c.api, err = network.Forward(apiHost); err != nil {
		t.Fatal(err)
	}
	c.apiServerName, _, _ = net.SplitHostPort(apiHost)
	c.agentKubeconfig = c.kubeconfig(t, sa, "agent")
	c.config = filepath.Join(c.dir, "cloud-config.yaml")
	if err := os.WriteFile(c.config, []byte(cloudConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.agentBinary, err = install.Binary(c.dir, "baremetal-agent"); err != nil {
		t.Fatal(err)
	}
	for _, h := range network.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Label}}
		node, err := c.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.admin.CoreV1().Nodes().Delete(context.Background(), h.Label, metav1.DeleteOptions{}) })
		// The ccm probes the agent at the node's InternalIP.
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.IPv4.String()}}
		if _, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		serveName(t, h)
		c.startAgent(t, h)
	}
	for _, h := range network.Nodes {
		c.waitReady(t, h)
	}
	return c
}

// kubeconfig writes a kubeconfig for cfg that reaches the API server through the bridge.
func (c *cluster) kubeconfig(t testing.TB, cfg *rest.Config, name string) string {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + c.api.String()
	cfg.ServerName = c.apiServerName
	path := filepath.Join(c.dir, name+".kubeconfig")
	if err := install.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAgent runs the agent on node h until the test ends, and prints its log if the test
// fails.
func (c *cluster) startAgent(t testing.TB, h *netns.Host) *process.Process {
	t.Helper()
	p, err := process.StartCmd(h.Label+" agent", h.Command(context.Background(), c.agentBinary,
		"--node-name="+h.Label, "--kubeconfig="+c.agentKubeconfig, "--cloud-config="+c.config,
		"--metrics-address=127.0.0.1:7475", "--shutdown-grace-period=2s", "-v=2"))
	if err != nil {
		t.Fatal(err)
	}
	c.agents[h.Label] = p
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("%s agent log:\n%s", h.Label, p.Logs())
		}
	})
	return p
}

// serveName runs a TCP server on the node that writes the node's name to every
// connection and closes it.
func serveName(t testing.TB, h *netns.Host) {
	l, err := h.Listen("tcp", fmt.Sprintf(":%d", servicePort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go traffic.Serve(l, h.Label)
}

// get fetches path from a node agent's metrics address, from inside the node.
func (c *cluster) get(ctx context.Context, h *netns.Host, path string) (int, string, error) {
	client := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return h.Dial(ctx, network, addr)
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:7475"+path, nil)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, b.String(), nil
}

func (c *cluster) waitReady(t testing.TB, h *netns.Host) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, _, err := c.get(ctx, h, "/readyz")
		return err == nil && code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("agent of %s not ready: %v\n%s", h.Label, err, c.agents[h.Label].Tail(20))
	}
}

// metric returns the value of one sample, as written after the name and labels, from a
// node agent's /metrics.
func (c *cluster) metric(t testing.TB, h *netns.Host, sample string) string {
	t.Helper()
	_, body, err := c.get(context.Background(), h, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// createService creates a LoadBalancer Service and gives it addresses, as the ccm would.
func (c *cluster) createService(t testing.TB, name string, ips ...netip.Addr) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	ns, err := c.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports:                         []corev1.ServicePort{{Port: servicePort}},
		},
	}
	if svc, err = c.admin.CoreV1().Services(ns.Name).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	if svc, err = c.admin.CoreV1().Services(ns.Name).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every node accepts the Service's traffic, like kube-proxy would.
	for _, h := range c.net.Nodes {
		for _, ip := range ips {
			if err := h.AddLocal(ip); err != nil {
				t.Fatal(err)
			}
		}
	}
	return svc
}

// setAnnouncer writes the announcer annotation as the ccm does, and returns when the API
// server has it.
func (c *cluster) setAnnouncer(t testing.TB, svc *corev1.Service, node string) time.Time {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotation.Announcer, node)
	start := time.Now()
	if _, err := c.admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return start
}

// node returns the host of a node by its name.
func (c *cluster) node(name string) *netns.Host {
	for _, h := range c.net.Nodes {
		if h.Label == name {
			return h
		}
	}
	panic("no node " + name)
}

// reach connects from the client to addr and returns the name of the node that answered.
func (c *cluster) reach(addr netip.Addr) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return traffic.Reach(ctx, c.net.Client.Dial, netip.AddrPortFrom(addr, servicePort))
}
