package kubeproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubeproxy"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

const (
	// serverPort is where the test's servers listen on the nodes: the Services'
	// targetPort.
	serverPort = 8080
	// servicePort is the port of the Services.
	servicePort = 80
	// trafficWait bounds each wait for kube-proxy to forward what it should. It takes
	// a second or so (its minimum sync period); the bound only ends a test whose
	// kube-proxy never does.
	trafficWait = 30 * time.Second
)

// The Services' load-balancer addresses: in the test network, used by no host.
var (
	clusterLB4 = netip.MustParseAddr("198.18.0.100")
	clusterLB6 = netip.MustParseAddr("fd00:198:18::100")
	localLB4   = netip.MustParseAddr("198.18.0.101")
	remoteLB4  = netip.MustParseAddr("198.18.0.102")
)

// clusterCIDRs are the Pod networks kube-proxy is told of: no host of the test network is
// in them, so all traffic there is external.
var clusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}

// env is a test network whose nodes are Nodes of the shared control plane, and what a
// test needs to run kube-proxy on them.
type env struct {
	net   *netns.Network
	admin kubernetes.Interface
	// kubeconfig has kube-proxy's credentials, and reaches the API server from inside
	// the namespaces.
	kubeconfig string
}

// newEnv builds a network of n nodes, registers each as a Node named after its namespace
// (unique, so that tests never share one), and writes a kubeconfig for kube-proxy.
// Everything is removed when the test ends.
func newEnv(t *testing.T, n int) *env {
	t.Helper()
	netns.RequireRoot(t)
	if _, err := controlplane.Binary("kube-proxy"); err != nil {
		controlplane.SkipOrFail(t, err)
	}
	cp := controlplane.Shared(t)
	e := &env{net: netns.ForTest(t, n), admin: kubernetes.NewForConfigOrDie(cp.AdminConfig())}
	for _, h := range e.net.Nodes {
		e.addNode(t, h)
	}
	cfg, err := cp.KubeProxyConfig()
	if err != nil {
		t.Fatal(err)
	}
	// The namespaces cannot reach the root namespace's loopback, where kube-apiserver
	// listens: a forwarder on the bridge can. Its serving certificate names 127.0.0.1.
	apiHost := strings.TrimPrefix(cfg.Host, "https://")
	api, err := e.net.Forward(apiHost)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = "https://" + api.String()
	cfg.ServerName, _, _ = net.SplitHostPort(apiHost)
	e.kubeconfig = filepath.Join(t.TempDir(), "kube-proxy.kubeconfig")
	if err := install.WriteKubeconfig(cfg, e.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return e
}

// addNode registers h as a Node with its two addresses, as a kubelet would: kube-proxy
// takes its node IPs from there.
func (e *env) addNode(t *testing.T, h *netns.Host) {
	t.Helper()
	ctx := t.Context()
	node, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.admin.CoreV1().Nodes().Delete(ctx, h.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Node %s: %v", h.Name, err)
		}
	})
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: h.IPv4.String()},
		{Type: corev1.NodeInternalIP, Address: h.IPv6.String()},
		{Type: corev1.NodeHostName, Address: h.Label},
	}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serve runs a server on h's serverPort, on both families, that answers with h's label.
func serve(t *testing.T, h *netns.Host) {
	t.Helper()
	l, err := h.Listen("tcp", fmt.Sprintf(":%d", serverPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go traffic.Serve(l, h.Label)
}

// lbService describes a Service of type LoadBalancer without a selector (the test writes
// its EndpointSlices) with the given traffic policy and families.
type lbService struct {
	policy    corev1.ServiceExternalTrafficPolicy
	families  []corev1.IPFamily
	addresses []netip.Addr // its status.loadBalancer.ingress
}

// create creates the Service, and sets its load-balancer addresses as a cloud provider
// would. It is deleted when the test ends.
func (e *env) createService(t *testing.T, s lbService) *corev1.Service {
	t.Helper()
	ctx := t.Context()
	policy := corev1.IPFamilyPolicySingleStack
	if len(s.families) > 1 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	svc, err := e.admin.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubeproxy-"},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: s.policy,
			IPFamilyPolicy:        &policy,
			IPFamilies:            s.families,
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(serverPort),
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.admin.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Service %s: %v", svc.Name, err)
		}
	})
	for _, a := range s.addresses {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
	}
	svc, err = e.admin.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// addEndpoint writes an EndpointSlice of svc with one ready endpoint, addr on node h, as
// the EndpointSlice controller would for a ready Pod there. It is deleted when the test
// ends.
func (e *env) addEndpoint(t *testing.T, svc *corev1.Service, h *netns.Host, addr netip.Addr) {
	t.Helper()
	addressType := discoveryv1.AddressTypeIPv4
	if addr.Is6() {
		addressType = discoveryv1.AddressTypeIPv6
	}
	slice, err := e.admin.DiscoveryV1().EndpointSlices(svc.Namespace).Create(t.Context(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: svc.Name + "-",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   "kubeproxy-test",
			},
		},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(h.Name),
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](serverPort),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.admin.DiscoveryV1().EndpointSlices(slice.Namespace).Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete EndpointSlice %s: %v", slice.Name, err)
		}
	})
}

// routeTo makes the client send traffic for addr to node h, with a permanent neighbour
// entry, as an agent's announcement would: no agent runs in these tests.
func (e *env) routeTo(t *testing.T, addr netip.Addr, h *netns.Host) {
	t.Helper()
	c := e.net.Client
	if _, err := c.Run(t.Context(), "ip", "neigh", "replace", addr.String(), "lladdr", h.MAC.String(), "dev", c.Interface, "nud", "permanent"); err != nil {
		t.Fatal(err)
	}
}

// waitReach waits until a connection from the client to addr reaches the server that
// answers want.
func (e *env) waitReach(t *testing.T, addr netip.Addr, want string) {
	t.Helper()
	target := netip.AddrPortFrom(addr, servicePort)
	deadline := time.Now().Add(trafficWait)
	var last string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		got, err := traffic.Reach(ctx, e.net.Client.Dial, target)
		cancel()
		if err == nil && got == want {
			return
		}
		last = fmt.Sprintf("answer %q, error %v", got, err)
		if time.Now().After(deadline) {
			t.Fatalf("the client got no answer from %s through %s in %s; last: %s", want, target, trafficWait, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The real kube-proxy on node1 hands load-balancer traffic that reaches node1 to the
// Service's endpoint on node2, for both families, and serves the health check node port
// of a Local Service, in both of its modes. The client sends the traffic to node1's MAC,
// as it would after node1's agent announced the addresses; node2 has no kube-proxy and
// no route to the addresses, so only node1's rules can bring the connection to node2's
// server. kube-proxy starts before the Services exist: it acts on what it watches.
func TestLoadBalancerTraffic(t *testing.T) {
	for _, mode := range []kubeproxy.Mode{kubeproxy.NFTables, kubeproxy.IPTables} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, 2)
			node1, node2 := e.net.Nodes[0], e.net.Nodes[1]
			serve(t, node1)
			serve(t, node2)
			kp := kubeproxy.StartForTest(t, node1, kubeproxy.Config{
				NodeName: node1.Name, Kubeconfig: e.kubeconfig, ClusterCIDRs: clusterCIDRs, Mode: mode,
			})
			if !rulesOf(t, node1, mode) {
				t.Fatalf("no %s rules of kube-proxy in %s", mode, node1.Name)
			}

			// externalTrafficPolicy Cluster, dual-stack, its endpoints on node2.
			cluster := e.createService(t, lbService{
				policy:    corev1.ServiceExternalTrafficPolicyCluster,
				families:  []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				addresses: []netip.Addr{clusterLB4, clusterLB6},
			})
			e.addEndpoint(t, cluster, node2, node2.IPv4)
			e.addEndpoint(t, cluster, node2, node2.IPv6)
			for _, a := range []netip.Addr{clusterLB4, clusterLB6} {
				e.routeTo(t, a, node1)
				e.waitReach(t, a, node2.Label)
			}

			// externalTrafficPolicy Local with an endpoint on node1: its health check
			// node port on node1 says so, and the traffic stays on node1.
			local := e.createService(t, lbService{
				policy:    corev1.ServiceExternalTrafficPolicyLocal,
				families:  []corev1.IPFamily{corev1.IPv4Protocol},
				addresses: []netip.Addr{localLB4},
			})
			e.addEndpoint(t, local, node1, node1.IPv4)
			e.waitHealthCheck(t, local, node1, http.StatusOK, 1)
			e.routeTo(t, localLB4, node1)
			e.waitReach(t, localLB4, node1.Label)

			// externalTrafficPolicy Local with its endpoint on node2 only: node1's health
			// check node port fails, so that a load balancer would not pick node1.
			remote := e.createService(t, lbService{
				policy:    corev1.ServiceExternalTrafficPolicyLocal,
				families:  []corev1.IPFamily{corev1.IPv4Protocol},
				addresses: []netip.Addr{remoteLB4},
			})
			e.addEndpoint(t, remote, node2, node2.IPv4)
			e.waitHealthCheck(t, remote, node1, http.StatusServiceUnavailable, 0)

			if code, body, err := kp.Healthz(t.Context()); err != nil || code != http.StatusOK {
				t.Errorf("kube-proxy /healthz after the test: %d %s %v", code, body, err)
			}
		})
	}
}

// waitHealthCheck waits until svc's health check node port on node h answers code with
// localEndpoints endpoints, as a load balancer's health check sees it from the client.
func (e *env) waitHealthCheck(t *testing.T, svc *corev1.Service, h *netns.Host, code, localEndpoints int) {
	t.Helper()
	port := svc.Spec.HealthCheckNodePort
	if port == 0 {
		t.Fatalf("Service %s has no health check node port", svc.Name)
	}
	url := "http://" + net.JoinHostPort(h.IPv4.String(), strconv.Itoa(int(port))) + "/"
	client := &http.Client{Transport: &http.Transport{DialContext: e.net.Client.Dial, DisableKeepAlives: true}, Timeout: time.Second}
	deadline := time.Now().Add(trafficWait)
	var last string
	for {
		gotCode, body, err := install.Get(t.Context(), client, url)
		var answer struct {
			LocalEndpoints int `json:"localEndpoints"`
			Service        struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"service"`
		}
		if err == nil && json.Unmarshal([]byte(body), &answer) == nil && gotCode == code &&
			answer.LocalEndpoints == localEndpoints && answer.Service.Name == svc.Name {
			return
		}
		last = fmt.Sprintf("%d %q %v", gotCode, strings.TrimSpace(body), err)
		if time.Now().After(deadline) {
			t.Fatalf("health check node port %s of Service %s: want %d with %d local endpoints; last answer: %s", url, svc.Name, code, localEndpoints, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rulesOf reports whether h's namespace has kube-proxy's rules of mode: its nftables
// tables, or its iptables chains.
func rulesOf(t *testing.T, h *netns.Host, mode kubeproxy.Mode) bool {
	t.Helper()
	if mode == kubeproxy.IPTables {
		out, err := h.Run(t.Context(), "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out, ":KUBE-SERVICES")
	}
	tables := nftTables(t, h)
	return strings.Contains(tables, "table ip kube-proxy") && strings.Contains(tables, "table ip6 kube-proxy")
}

// nftTables lists the nftables tables of h's namespace, or of the root namespace for
// nil.
func nftTables(t *testing.T, h *netns.Host) string {
	t.Helper()
	if h == nil {
		out, err := exec.CommandContext(t.Context(), "nft", "list", "tables").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list tables: %v: %s", err, out)
		}
		return string(out)
	}
	out, err := h.Run(t.Context(), "nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kube-proxy writes its rules into its namespace only, Stop stops it, and its rules go
// with the namespace. A kube-proxy nobody stopped, as after a test that failed before
// its cleanup, dies with the namespace too.
func TestNothingLeftBehind(t *testing.T) {
	netns.RequireRoot(t)
	if _, err := controlplane.Binary("kube-proxy"); err != nil {
		controlplane.SkipOrFail(t, err)
	}
	rootBefore := nftTables(t, nil)
	e := newEnv(t, 2)
	node1, node2 := e.net.Nodes[0], e.net.Nodes[1]
	config := kubeproxy.Config{NodeName: node1.Name, Kubeconfig: e.kubeconfig, ClusterCIDRs: clusterCIDRs, Dir: t.TempDir()}
	stopped, err := kubeproxy.Start(t.Context(), node1, config)
	if err != nil {
		t.Fatal(err)
	}
	config.NodeName = node2.Name
	left, err := kubeproxy.Start(t.Context(), node2, config)
	if err != nil {
		_ = stopped.Stop()
		t.Fatal(err)
	}
	for _, h := range []*netns.Host{node1, node2} {
		if !rulesOf(t, h, kubeproxy.NFTables) {
			t.Errorf("no nftables tables of kube-proxy in %s:\n%s", h.Name, nftTables(t, h))
		}
	}
	// Only kube-proxy's tables are compared: other programs on the machine may add
	// and remove tables of their own meanwhile.
	if got := nftTables(t, nil); strings.Count(got, "kube-proxy") != strings.Count(rootBefore, "kube-proxy") {
		t.Errorf("kube-proxy's nftables tables in the root namespace changed:\nbefore:\n%s\nafter:\n%s", rootBefore, got)
	}

	if err := stopped.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if process.Alive(stopped.Pid()) {
		t.Errorf("kube-proxy %d still runs after Stop", stopped.Pid())
	}
	if err := e.net.Close(); err != nil {
		t.Fatal(err)
	}
	if process.Alive(left.Pid()) {
		t.Errorf("kube-proxy %d, never stopped, still runs after its namespace was deleted", left.Pid())
	}
	for _, h := range []*netns.Host{node1, node2} {
		if _, err := os.Stat(h.Path()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after Close: %v", h.Name, err)
		}
		if out, err := h.Run(t.Context(), "nft", "list", "tables"); err == nil {
			t.Errorf("nft list tables in %s, deleted, succeeded:\n%s", h.Name, out)
		}
	}
}

// A kube-proxy that cannot start is reported with the end of its log, and is not left
// running.
func TestStartReportsKubeProxyThatExits(t *testing.T) {
	netns.RequireRoot(t)
	if _, err := controlplane.Binary("kube-proxy"); err != nil {
		controlplane.SkipOrFail(t, err)
	}
	n := netns.ForTest(t, 1)
	missing := filepath.Join(t.TempDir(), "missing.kubeconfig")
	_, err := kubeproxy.Start(t.Context(), n.Nodes[0], kubeproxy.Config{NodeName: n.Nodes[0].Name, Kubeconfig: missing, Dir: t.TempDir()})
	if err == nil {
		t.Fatal("Start with a missing kubeconfig succeeded")
	}
	for _, want := range []string{"kube-proxy on node1 exited before its first sync", "missing.kubeconfig"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start error does not say %q:\n%v", want, err)
		}
	}
}

func TestStartWithoutBinary(t *testing.T) {
	t.Setenv(controlplane.BinDirEnv, t.TempDir())
	_, err := kubeproxy.Start(t.Context(), &netns.Host{Label: "node1"}, kubeproxy.Config{NodeName: "node1", Kubeconfig: "kubeconfig", Dir: t.TempDir()})
	if !errors.Is(err, controlplane.ErrBinaryNotFound) {
		t.Fatalf("Start without kube-proxy: got %v, want ErrBinaryNotFound", err)
	}
}
