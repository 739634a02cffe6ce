// Package e2e runs the project's binaries on network namespaces: nodes on a bridge, each
// with the real agent, a client namespace whose own kernel resolves and connects to
// Service addresses, and the real control plane. It needs root; outside CI it skips
// without.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

func TestMain(m *testing.M) {
	// The $EDITOR of TestInstall's docs/install.md commands, when it runs as that.
	install.RunEditor()
	// Every Service of the tests is externalTrafficPolicy Local, which takes a health
	// check node port: the default range has 2,768, the failover benchmark makes 5,000.
	os.Exit(controlplane.RunTests(m, controlplane.WithAPIServerFlag("service-node-port-range", "20000-32767")))
}

// cloudConfig has one pool inside the test network, so that the nodes' eth0 is the
// interface its addresses are announced on. 198.18.0.180 is in the subnet but in no pool.
// Pool late is on no node's subnet until a test adds one.
const cloudConfig = `
pools:
- name: e2e
  addresses: [198.18.0.100-198.18.0.150, "fd00:198:18::100-fd00:198:18::150"]
- name: late
  addresses: [198.18.5.0/24]
  autoAssign: false
`

// servicePort is where the pods of every Service listen.
const servicePort = testbed.ServicePort

// cluster is a test's testbed, with the helpers tests share.
type cluster struct {
	*testbed.Cluster
}

// newCluster builds a testbed of n nodes on the shared control plane, and tears it down
// when the test ends, printing every process's log if the test failed.
func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	return newClusterOn(t, controlplane.Shared(t), n)
}

// newClusterOn is newCluster on a given control plane.
func newClusterOn(t testing.TB, cp *controlplane.ControlPlane, n int) *cluster {
	t.Helper()
	return newClusterWith(t, cp, n, cloudConfig)
}

// newClusterWith is newClusterOn with a cloud-config of its own.
func newClusterWith(t testing.TB, cp *controlplane.ControlPlane, n int, config string) *cluster {
	t.Helper()
	return newClusterImages(t, cp, n, config, nil)
}

// newClusterImages is newClusterWith with the agents and the ccm run from images, when
// images is not nil.
func newClusterImages(t testing.TB, cp *controlplane.ControlPlane, n int, config string, images *testbed.Images) *cluster {
	t.Helper()
	netns.RequireRoot(t)
	tb, err := testbed.NewWithImages(context.Background(), cp, n, config, t.TempDir(), images)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range tb.Processes() {
				t.Logf("%s log:\n%s", p.Name(), p.Logs())
			}
			for _, h := range tb.Net.Nodes {
				if kp := tb.KubeProxy(h.Label); kp != nil {
					t.Logf("kube-proxy on %s log:\n%s", h.Label, kp.Logs())
				}
			}
		}
		if err := tb.Close(); err != nil {
			t.Errorf("tear down the testbed: %v", err)
		}
	})
	return &cluster{tb}
}

// startAgent runs the agent on node h again.
func (c *cluster) startAgent(t testing.TB, h *netns.Host) {
	t.Helper()
	if _, err := c.StartAgent(h); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) waitReady(t testing.TB, h *netns.Host) {
	t.Helper()
	if err := c.WaitAgentReady(context.Background(), h); err != nil {
		t.Fatal(err)
	}
}

// metric returns the value of one sample, as written after the name and labels, from a
// node agent's /metrics.
func (c *cluster) metric(t testing.TB, h *netns.Host, sample string) string {
	t.Helper()
	_, body, err := c.AgentGet(context.Background(), h, "/metrics")
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

// createService creates a LoadBalancer Service with a pod on every node and gives it
// addresses, as the ccm would.
func (c *cluster) createService(t testing.TB, name string, ips ...netip.Addr) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	ns := c.namespace(t)
	c.serve(t, ns, name)
	svc := testbed.ServiceFor(ns, name, name)
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	if svc, err = c.Admin.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return svc
}

// namespace creates a namespace of its own for a test's Service.
func (c *cluster) namespace(t testing.TB) string {
	t.Helper()
	ns, err := c.Admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// serve puts a pod of app on each of nodes, every node when none is given: the Service's
// traffic reaches them through the announcer's kube-proxy.
func (c *cluster) serve(t testing.TB, namespace, app string, nodes ...*netns.Host) {
	t.Helper()
	if _, err := c.Serve(context.Background(), namespace, app, nodes...); err != nil {
		t.Fatal(err)
	}
}

// setAnnouncer writes the announcer annotation as the ccm does, and returns when the API
// server has it.
func (c *cluster) setAnnouncer(t testing.TB, svc *corev1.Service, node string) time.Time {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annotation.Announcer, node)
	start := time.Now()
	if _, err := c.Admin.CoreV1().Services(svc.Namespace).Patch(context.Background(), svc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return start
}

// reach connects from the client to addr and returns the name of the node that answered.
func (c *cluster) reach(addr netip.Addr) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return traffic.Reach(ctx, c.Net.Client.Dial, netip.AddrPortFrom(addr, servicePort))
}
