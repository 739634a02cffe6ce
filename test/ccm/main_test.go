// Package ccm tests the baremetal-ccm binary as it runs in a cluster: a real process,
// against a real kube-apiserver and etcd, with the credentials the project's manifests
// grant its ServiceAccount.
package ccm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// cloudConfig is the pools every test here draws from. Tests keep to their own pools or
// namespaces so they can share one ccm.
const cloudConfig = `
pools:
- name: default
  addresses: [198.18.0.0/20, fd00:ba5e::/64]
- name: reserved
  addresses: [192.0.2.0/24]
  autoAssign: false
- name: single
  addresses: [203.0.113.77/32]
  autoAssign: false
- name: bench
  addresses: [198.19.0.0/16]
  autoAssign: false
- name: edge
  addresses: [203.0.113.0/28]
  autoAssign: false
  nodeSelector:
    matchLabels: {edge: "true"}
- name: edge6
  addresses: [fd00:ed6e::/120]
  autoAssign: false
  nodeSelector:
    matchLabels: {edge6: "true"}
`

// The installed ccm's identity, from manifests/.
const (
	ccmNamespace      = "baremetal-system"
	ccmServiceAccount = "baremetal-ccm"
)

// env is what every test here shares: the control plane with the manifests applied, an
// admin client, and the files the ccm runs with.
type env struct {
	cp         *controlplane.ControlPlane
	admin      kubernetes.Interface
	dir        string
	binary     string
	kubeconfig string
	config     string
	keyFile    string
	key        *probe.Key
	// verdictKeyFile is the ccm's private key, and ccmKey the agents' check of it.
	verdictKeyFile string
	ccmKey         *probe.Verifier
	agents         map[string]*agent
}

var (
	sharedEnv     *env
	sharedEnvErr  error
	sharedEnvOnce sync.Once
)

// setup returns the shared env, installing the manifests on first use.
func setup(t testing.TB) *env {
	t.Helper()
	cp := controlplane.Shared(t)
	sharedEnvOnce.Do(func() { sharedEnv, sharedEnvErr = newEnv(cp) })
	if sharedEnvErr != nil {
		t.Fatal(sharedEnvErr)
	}
	return sharedEnv
}

func newEnv(cp *controlplane.ControlPlane) (*env, error) {
	ctx := context.Background()
	e := &env{cp: cp}
	var err error
	if e.admin, err = kubernetes.NewForConfig(cp.AdminConfig()); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", "baremetal-ccm-test-"); err != nil {
		return nil, err
	}
	manifests, err := render.ManifestsDir()
	if err != nil {
		return nil, err
	}
	if err := install.Apply(ctx, cp.AdminConfig(), manifests); err != nil {
		return nil, err
	}
	saConfig, err := cp.ServiceAccountConfig(ctx, ccmNamespace, ccmServiceAccount)
	if err != nil {
		return nil, err
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := install.WriteKubeconfig(saConfig, e.kubeconfig); err != nil {
		return nil, err
	}
	if e.keyFile, e.key, err = testbed.WriteProbeKey(e.dir); err != nil {
		return nil, err
	}
	var signer *probe.Signer
	if e.verdictKeyFile, _, signer, err = testbed.WriteVerdictKeys(e.dir); err != nil {
		return nil, err
	}
	e.ccmKey = signer.Verifier()
	// Every node gets a real health responder, the agent's, on a loopback address of its
	// own: the ccm probes it exactly as it probes an agent on a node.
	port, err := e.startAgents()
	if err != nil {
		return nil, err
	}
	e.config = filepath.Join(e.dir, "cloud-config.yaml")
	if err := os.WriteFile(e.config, fmt.Appendf(nil, "%sfailover:\n  agentPort: %d\n", cloudConfig, port), 0o644); err != nil {
		return nil, err
	}
	if e.binary, err = install.Binary(e.dir, "baremetal-ccm"); err != nil {
		return nil, err
	}
	// The service controller leaves a Service without nodes alone with a warning; a real
	// cluster has nodes.
	for _, name := range []string{"node-a", "node-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		node, err := e.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: e.agents[name].ip}}
		if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// agent is a node's health responder.
type agent struct {
	node, ip string
	port     int
	key      *probe.Key
	ccm      *probe.Verifier
	mu       sync.Mutex
	conn     net.PacketConn
}

// startAgents starts a responder for node-a on 127.0.0.2 and one for node-b on 127.0.0.3,
// on one port, which it returns.
func (e *env) startAgents() (int, error) {
	for range 100 {
		l, err := net.ListenPacket("udp", "127.0.0.2:0")
		if err != nil {
			return 0, err
		}
		port := l.LocalAddr().(*net.UDPAddr).Port
		l.Close()
		e.agents = map[string]*agent{
			"node-a": {node: "node-a", ip: "127.0.0.2", port: port, key: e.key, ccm: e.ccmKey},
			"node-b": {node: "node-b", ip: "127.0.0.3", port: port, key: e.key, ccm: e.ccmKey},
		}
		if e.agents["node-a"].start() == nil && e.agents["node-b"].start() == nil {
			return port, nil
		}
		e.agents["node-a"].stop()
	}
	return 0, errors.New("no UDP port free on both 127.0.0.2 and 127.0.0.3")
}

// start makes the node's agent answer probes.
func (a *agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		return nil
	}
	conn, err := net.ListenPacket("udp", net.JoinHostPort(a.ip, strconv.Itoa(a.port)))
	if err != nil {
		return err
	}
	r, err := responder.New(a.node, a.key, a.ccm, 100*time.Millisecond, nil)
	if err != nil {
		conn.Close()
		return err
	}
	a.conn = conn
	go func() { _ = r.Serve(conn) }() // nil once stop closes conn
	return nil
}

// stop makes the node's agent stop answering, as if its process had died.
func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		a.conn.Close()
		a.conn = nil
	}
}

// startCCM runs the ccm binary until the test ends, and prints its log if the test fails.
// Leader election is on, with short timings, so a restart after kill -9 takes over the
// lease in seconds.
func (e *env) startCCM(t testing.TB, extraArgs ...string) *process.Process {
	t.Helper()
	p, _ := e.startServingCCM(t, extraArgs...)
	return p
}

// startServingCCM is startCCM, with the ccm's secure port (health and metrics) on a free
// loopback port, returned as host:port.
func (e *env) startServingCCM(t testing.TB, extraArgs ...string) (*process.Process, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	args := append([]string{
		"--kubeconfig=" + e.kubeconfig,
		// In a pod these default to the in-cluster credentials; here they must be named
		// for the secure port to authenticate and authorize its callers.
		"--authentication-kubeconfig=" + e.kubeconfig,
		"--authorization-kubeconfig=" + e.kubeconfig,
		"--cloud-provider=baremetal",
		"--cloud-config=" + e.config,
		"--probe-key-file=" + e.keyFile,
		"--verdict-key-file=" + e.verdictKeyFile,
		"--leader-elect=true",
		"--leader-elect-resource-namespace=" + ccmNamespace,
		"--leader-elect-lease-duration=3s",
		"--leader-elect-renew-deadline=2s",
		"--leader-elect-retry-period=250ms",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", addr.Port),
		"--cert-dir=" + t.TempDir(),
		// Off unless a test asks for it: its default port is one for the whole host, and
		// tests run more than one ccm at a time. A later --status-address wins.
		"--status-address=",
		"--v=2",
	}, extraArgs...)
	p, err := process.Start("baremetal-ccm", e.binary, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil && !strings.Contains(err.Error(), "had exited") {
			t.Errorf("stop baremetal-ccm: %v", err)
		}
		if t.Failed() {
			t.Logf("baremetal-ccm log:\n%s", p.Logs())
		}
	})
	return p, addr.String()
}

// namespace creates a namespace for one test.
func (e *env) namespace(t testing.TB) string {
	t.Helper()
	ns, err := e.admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ccm-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// findEvent returns the message of a reason event on the Service that contains text.
func (e *env) findEvent(ctx context.Context, ns, name, reason, text string) string {
	msg, _ := events.Find(ctx, e.admin, ns, name, reason, text)
	return msg
}

// countEvents returns how many times events of reason were recorded on the Service.
// waitEvents waits until the Service has at least n events of reason, and returns how
// many it has then.
func (e *env) waitEvents(t testing.TB, ns, name, reason string, n int) int {
	t.Helper()
	var got int
	poll.Until(t, assignTimeout, func(ctx context.Context) (bool, string) {
		var err error
		if got, err = events.Count(ctx, e.admin, ns, name, reason); err != nil {
			return false, err.Error()
		}
		return got >= n, fmt.Sprintf("%d %s events on %s/%s, want %d", got, reason, ns, name, n)
	})
	return got
}

// metricValue returns the value of a sample of the ccm's metrics, 0 if it has none.
func (e *env) metricValue(t testing.TB, hostPort, sample string) float64 {
	t.Helper()
	for line := range strings.Lines(e.scrape(t, hostPort)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return f
		}
	}
	return 0
}

func (e *env) countEvents(t testing.TB, ns, name, reason string) int {
	t.Helper()
	n, err := events.Count(context.Background(), e.admin, ns, name, reason)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
