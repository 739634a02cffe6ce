// Package kubenodes joins real nodes to a test control plane: containerd, the kubelet and
// kube-proxy on every node of a netns.Network, for the tests that install the project
// from its release and run pods (the install test, Kubernetes' own LoadBalancer specs).
package kubenodes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubeproxy"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/node"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// Controllers are the controllers of kube-controller-manager that workloads on real nodes
// need: the workloads' own (a Deployment's ReplicaSets and Pods, a DaemonSet's Pods), the
// ServiceAccounts and the CA ConfigMap of each namespace that the ServiceAccount
// admission plugin and the Pods' token volumes need, the node lifecycle controller that
// lifts the not-ready taint a kubelet registers its node with, the EndpointSlices
// kube-proxy and the ccm read, and what a deletion needs (the namespace's contents, the
// garbage collector's dependents).
var Controllers = []string{
	"deployment-controller", "replicaset-controller", "daemonset-controller",
	"serviceaccount-controller", "root-ca-certificate-publisher-controller",
	"node-lifecycle-controller", "namespace-controller", "garbage-collector-controller",
	"endpointslice-controller",
}

// serviceRanges are the control plane's Service ClusterIP ranges, which the nodes route to
// their eth0 for kube-proxy to take.
var serviceRanges = []string{"10.96.0.0/16", "fd00:10:96::/112"}

// ClusterDNS is the pods' name server: the ClusterIP that a cluster DNS's Service named
// kube-dns takes, as kubeadm's does.
var ClusterDNS = netip.MustParseAddr("10.96.0.10")

// A Cluster is the nodes of a network joined to a control plane.
type Cluster struct {
	// API is where the hosts of the network reach the API server, and ServerName the
	// name its certificate is for.
	API        netip.AddrPort
	ServerName string
	// Nodes run containerd and the kubelet, in the order of the network's nodes.
	Nodes []*node.Node

	network *netns.Network
}

// OptionsForTest returns the options of a control plane for the nodes of network: a
// serving certificate valid for the address the hosts of network reach it at, and an
// egress to the kubelets, for logs, exec and port forwarding, through an HTTP CONNECT
// proxy into the network that it starts.
func OptionsForTest(t testing.TB, network *netns.Network) []controlplane.Option {
	t.Helper()
	dir, err := os.MkdirTemp("", "bmt-egress-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "connect.sock")
	if err := network.ServeConnect(sock); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock)
	path := filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return []controlplane.Option{
		controlplane.WithAPIServerFlag("egress-selector-config-file", path),
		// The nodes' names resolve nowhere: the proxy dials their addresses.
		controlplane.WithAPIServerFlag("kubelet-preferred-address-types", "InternalIP"),
		// Where Forward listens.
		controlplane.WithServingIP(network.Bridge.IPv4),
	}
}

// StartForTest runs containerd, the kubelet and kube-proxy on every node of network,
// joined to cp, and returns once every Node is Ready. The kubelets run every pod's
// sandbox from the image archive pauseArchive. Everything stops when the test ends; the
// nodes' logs are logged when it failed.
func StartForTest(t testing.TB, cp *controlplane.ControlPlane, network *netns.Network, pauseArchive string) *Cluster {
	t.Helper()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{network: network}
	c.API, c.ServerName = apiForNodes(t, cp, network, admin)
	c.startNodes(t, cp, admin, pauseArchive)
	return c
}

// apiForNodes makes the API server reachable from the nodes: at a forwarder on the
// bridge, which the kubelets are given, and at the kubernetes Service's ClusterIP, which
// pods get from the kubelet and kube-proxy sends to that forwarder. It returns the
// forwarder's address and the name in the API server's certificate.
func apiForNodes(t testing.TB, cp *controlplane.ControlPlane, network *netns.Network, admin kubernetes.Interface) (netip.AddrPort, string) {
	t.Helper()
	host := strings.TrimPrefix(cp.AdminConfig().Host, "https://")
	api, err := network.Forward(host)
	if err != nil {
		t.Fatal(err)
	}
	// The control plane writes no endpoints for the kubernetes Service (its API server
	// listens on loopback): this slice says where the nodes reach it.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes",
			discoveryv1.LabelManagedBy:   "e2e.test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{api.Addr().String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(api.Port())), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(t.Context(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The bridge's namespace stands for the machine the API server runs on, which
	// reaches the pods of every node, as a cluster's network routes them.
	for _, h := range network.Nodes {
		if _, err := network.Bridge.Run(t.Context(), "ip", "route", "add", h.PodSubnet4.String(), "via", h.IPv4.String()); err != nil {
			t.Fatal(err)
		}
	}
	name, _, _ := strings.Cut(host, ":")
	return api, name
}

// startNodes runs containerd, the kubelet and kube-proxy on every node of the network,
// and returns once every Node is Ready.
func (c *Cluster) startNodes(t testing.TB, cp *controlplane.ControlPlane, admin kubernetes.Interface, pauseArchive string) {
	t.Helper()
	ctx := t.Context()
	// The kubelets' credentials: RBAC's system:node role, granted to the group of the
	// nodes, as clusters did before the Node authorizer (this control plane runs RBAC
	// alone).
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy, err := cp.KubeProxyConfig()
	if err != nil {
		t.Fatal(err)
	}
	proxyKubeconfig := c.Kubeconfig(t, proxy, "kube-proxy")
	for _, h := range c.network.Nodes {
		// In a cluster the nodes' default route covers the Service range; kube-proxy
		// sends what goes there on to its endpoints.
		for _, r := range serviceRanges {
			if _, err := h.Run(ctx, "ip", "route", "add", r, "dev", h.Interface); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := cp.UserConfig("system:node:"+h.Label, "system:nodes")
		if err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp("", "bmt-node-")
		if err != nil {
			t.Fatal(err)
		}
		n, err := node.Start(ctx, node.Config{
			Host:         h,
			Dir:          dir,
			Kubeconfig:   c.Kubeconfig(t, cfg, "kubelet-"+h.Label),
			PauseArchive: pauseArchive,
			PodSubnet:    h.PodSubnet4,
			ClusterDNS:   ClusterDNS,
		})
		if err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(n.Logs())
			}
			if err := n.Close(); err != nil {
				t.Errorf("stop node %s: %v", h.Label, err)
			}
			os.RemoveAll(dir)
		})
		c.Nodes = append(c.Nodes, n)
	}
	for _, h := range c.network.Nodes {
		poll.Until(t, 2*time.Minute, func(ctx context.Context) (bool, string) {
			n, err := admin.CoreV1().Nodes().Get(ctx, h.Label, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("get node %s: %v", h.Label, err)
			}
			return err == nil && ready(n), "node " + h.Label + " Ready"
		})
		kp, err := kubeproxy.Start(ctx, h, kubeproxy.Config{
			NodeName:     h.Label,
			Kubeconfig:   proxyKubeconfig,
			ClusterCIDRs: []netip.Prefix{c.network.PodSubnet4, c.network.PodSubnet6},
			Dir:          t.TempDir(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("kube-proxy on %s log:\n%s", h.Label, kp.Logs())
			}
			if err := kp.Stop(); err != nil {
				t.Errorf("stop kube-proxy on %s: %v", h.Label, err)
			}
		})
	}
}

// ready reports whether n's Ready condition is True.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Kubeconfig writes a kubeconfig of cfg's credentials that reaches the API server from
// inside the network, at API, and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, cfg *rest.Config, name string) string {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + c.API.String()
	cfg.ServerName = c.ServerName
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := install.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Import loads the image archive at path into every node's containerd, and gives each
// image the names of also.
func (c *Cluster) Import(t testing.TB, path string, also ...string) {
	t.Helper()
	for _, n := range c.Nodes {
		name, err := n.Import(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range also {
			if _, err := n.Ctr(t.Context(), "images", "tag", name, ref); err != nil {
				t.Fatal(err)
			}
		}
	}
}
