package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

// benchNode is the node the measured agent runs for. The Services name it now and then,
// always with addresses outside its pools, so that it opens no packet socket and runs
// without root.
const benchNode = "bench-node"

// benchCloudConfig has one pool; the Services' addresses that name benchNode lie outside
// it.
const benchCloudConfig = `
pools:
- name: bench
  addresses: [198.18.0.0/15, fd00:be5c::/64]
`

// benchWriters is how many clients create the Services.
const benchWriters = 16

// baselineEnv names a second agent binary to measure on the same Services, such as one
// built from an older commit: its figure is reported as baseline-peak-RSS-MiB.
const baselineEnv = "BENCH_AGENT_BASELINE"

// BenchmarkAgentMemory reports the agent's peak resident memory (VmHWM) once it is ready
// and has processed every Service, with 5,000 and then 50,000 Services in the cluster.
// Run it with -benchtime=1x: one iteration is one whole run. The Services are a heavy
// mix: nine in ten of type LoadBalancer, with addresses in their status, the ccm's plan
// naming one of 50 nodes and two standbys, kubectl's last-applied-configuration and the
// managedFields of their creator; one in ten of type ClusterIP. The 45,000 Services
// beyond the first 5,000 are of the mix of a big cluster instead: one in ten
// LoadBalancer, the others ClusterIP, so that 50,000 Services hold 9,000 LoadBalancer
// ones. One in a hundred names benchNode, each refused once by its agent, which is how
// the benchmark knows the agent has processed them all.
//
// kube-apiserver counts every IPAddress object of a family each time it allocates a
// ClusterIP of that family (for its allocated-IPs metric), so creating n Services costs
// it O(n²): on 2 cores, IPv4 only, the rate fell from 95 to 30 creates a second by the
// 3,000th, and 50,000 of the heavy mix took 1 h 28 min to create. The LoadBalancer
// Services therefore alternate between IPv4 and IPv6 single stack, which halves that
// cost, and the ClusterIP ones are headless, which the agent cannot tell apart since it
// keeps nothing of them.
func BenchmarkAgentMemory(b *testing.B) {
	e := setup(b)
	created := 0
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				start := time.Now()
				e.createServices(b, created, n)
				created = n
				b.Logf("%d Services in the cluster (created in %s)", n, time.Since(start).Round(time.Second))
				b.StartTimer()
				b.ReportMetric(e.measure(b, e.binary, n), "peak-RSS-MiB")
				if baseline := os.Getenv(baselineEnv); baseline != "" {
					b.ReportMetric(e.measure(b, baseline, n), "baseline-peak-RSS-MiB")
				}
			}
		})
	}
}

// env is the control plane with the manifests applied, and the agent's files.
type env struct {
	cp         *controlplane.ControlPlane
	admin      kubernetes.Interface
	dir        string
	binary     string
	kubeconfig string
	config     string
	keyFile    string
	// publicKeyFile holds the public key of a ccm this benchmark never runs.
	publicKeyFile string
}

func setup(b *testing.B) *env {
	b.Helper()
	ctx := context.Background()
	cp := controlplane.Shared(b)
	e := &env{dir: b.TempDir()}
	var err error
	if e.admin, err = kubernetes.NewForConfig(cp.AdminConfig()); err != nil {
		b.Fatal(err)
	}
	manifests, err := render.ManifestsDir()
	if err != nil {
		b.Fatal(err)
	}
	if err := install.Apply(ctx, cp.AdminConfig(), manifests); err != nil {
		b.Fatal(err)
	}
	e.cp = cp
	e.kubeconfig = filepath.Join(e.dir, "agent.kubeconfig")
	var key *probe.Key
	if e.keyFile, key, err = testbed.WriteProbeKey(e.dir); err != nil {
		b.Fatal(err)
	}
	var signer *probe.Signer
	if _, e.publicKeyFile, signer, err = testbed.WriteVerdictKeys(e.dir); err != nil {
		b.Fatal(err)
	}
	port := e.startPeers(b, key, signer.Verifier())
	e.config = filepath.Join(e.dir, "cloud-config.yaml")
	if err := os.WriteFile(e.config, fmt.Appendf(nil, "%sfailover:\n  agentPort: %d\n", benchCloudConfig, port), 0o644); err != nil {
		b.Fatal(err)
	}
	if e.binary, err = install.Binary(e.dir, "baremetal-agent"); err != nil {
		b.Fatal(err)
	}
	// A second run (-count) finds them there.
	if _, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	for name, ip := range peers {
		node, err := e.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, ns := range namespaces {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	return e
}

// peers are the nodes of the plans that name benchNode, at the loopback addresses of
// their health responders. The agent takes its own node for down until it has heard the
// ccm or one of these, and only then refuses the Services that name it.
var peers = map[string]string{"node-01": "127.0.0.2", "node-02": "127.0.0.3"}

// startPeers starts a health responder for every peer, on one port, which it returns:
// the agent probes them there while no ccm is heard.
func (e *env) startPeers(b *testing.B, key *probe.Key, ccm *probe.Verifier) int {
	for range 100 {
		port := freePort(b, "udp")
		_, p, _ := net.SplitHostPort(port)
		var conns []net.PacketConn
		for name, ip := range peers {
			conn, err := net.ListenPacket("udp", net.JoinHostPort(ip, p))
			if err != nil {
				break
			}
			conns = append(conns, conn)
			r, err := responder.New(name, key, ccm, 100*time.Millisecond, nil)
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = r.Serve(conn) }() // nil once conn is closed; an error shows as requests unanswered
		}
		if len(conns) == len(peers) {
			b.Cleanup(func() {
				for _, c := range conns {
					c.Close()
				}
			})
			n, _ := strconv.Atoi(p)
			return n
		}
		for _, c := range conns {
			c.Close()
		}
	}
	b.Fatal("no UDP port free on every peer's address")
	return 0
}

// namespaces are where the Services go, round robin.
var namespaces = []string{"shop", "payments", "search", "media"}

// createServices creates Services from..to-1 with several writers, as many users and
// controllers would.
func (e *env) createServices(b *testing.B, from, to int) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range benchWriters {
		wg.Go(func() {
			for i := range next {
				if err := e.createService(i); err != nil {
					b.Error(err)
				}
			}
		})
	}
	start := time.Now()
	for i := from; i < to; i++ {
		if done := i - from; done > 0 && done%5000 == 0 {
			b.Logf("%d of %d Services created in %s", done, to-from, time.Since(start).Round(time.Second))
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// createService creates Service i of the mix, and for a LoadBalancer one sets its status
// as the ccm would.
func (e *env) createService(i int) error {
	ctx := context.Background()
	svc := benchService(i)
	status := svc.Status
	created, err := e.admin.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
	if apierrors.IsAlreadyExists(err) { // from an earlier run (-count)
		return nil
	}
	if err != nil {
		return err
	}
	if len(status.LoadBalancer.Ingress) == 0 {
		return nil
	}
	created.Status = status
	_, err = e.admin.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "baremetal-ccm"})
	return err
}

// names reports whether Service i names benchNode: always a LoadBalancer one.
func names(i int) bool { return i%100 == 0 }

// heavyMix is how many Services, from the first, are of the heavy mix: nine in ten of
// type LoadBalancer. The others are the mix of a big cluster, where LoadBalancer
// Services are few: one in ten.
const heavyMix = 5000

// clusterIP reports whether Service i is of type ClusterIP (headless).
func clusterIP(i int) bool {
	if i < heavyMix {
		return i%10 == 5
	}
	return i%10 != 0
}

// benchService returns Service i of the mix.
func benchService(i int) *corev1.Service {
	name := fmt.Sprintf("svc-%05d", i)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespaces[i%len(namespaces)],
			Labels: map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "bench"},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app.kubernetes.io/name": name},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
				{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443},
			},
			// There are only 2,768 node ports.
			AllocateLoadBalancerNodePorts: ptr.To(false),
		},
	}
	if clusterIP(i) {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.AllocateLoadBalancerNodePorts = nil
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	// Half the LoadBalancer Services of each mix are IPv6; those that name benchNode
	// are IPv4.
	v6 := i%2 == 1
	if i >= heavyMix {
		v6 = i%20 == 10
	}
	if v6 {
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	}
	announcer := fmt.Sprintf("node-%02d", i%50)
	if names(i) {
		announcer = benchNode
	}
	svc.Annotations = map[string]string{
		annotation.Announcer: announcer,
		annotation.Standbys:  fmt.Sprintf("node-%02d,node-%02d", (i+1)%50, (i+2)%50),
		"kubectl.kubernetes.io/last-applied-configuration": lastApplied(svc),
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		addr := fmt.Sprintf("198.18.%d.%d", i/256%512, i%256)
		if v6 {
			addr = fmt.Sprintf("fd00:be5c::%x", i)
		}
		if names(i) {
			addr = fmt.Sprintf("203.0.113.%d", i/100%256) // outside every pool
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	}
	return svc
}

// lastApplied is what kubectl apply would have written: the object as the user wrote it.
func lastApplied(svc *corev1.Service) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"labels":{"app.kubernetes.io/name":%q,"app.kubernetes.io/part-of":"bench"},"name":%q,"namespace":%q},"spec":{"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080},{"name":"https","port":443,"protocol":"TCP","targetPort":8443}],"selector":{"app.kubernetes.io/name":%q},"type":%q}}`+"\n",
		svc.Name, svc.Name, svc.Namespace, svc.Name, svc.Spec.Type)
}

// measure runs the agent binary until it is ready and has refused every Service of the
// n that names its node, and returns its peak resident memory in MiB.
func (e *env) measure(b *testing.B, binary string, n int) float64 {
	want := 0
	for i := range n {
		if names(i) {
			want++
		}
	}
	// The agent runs with its ServiceAccount of the manifests, as in a cluster, with a
	// token made now: one made at setup expires (in an hour) before 50,000 Services are
	// created.
	sa, err := e.cp.ServiceAccountConfig(context.Background(), "baremetal-system", "baremetal-agent")
	if err != nil {
		b.Fatal(err)
	}
	if err := install.WriteKubeconfig(sa, e.kubeconfig); err != nil {
		b.Fatal(err)
	}
	probeAddr, metricsAddr := freePort(b, "udp"), freePort(b, "tcp")
	p, err := process.Start("baremetal-agent", binary,
		"--node-name="+benchNode, "--kubeconfig="+e.kubeconfig, "--cloud-config="+e.config, "--probe-key-file="+e.keyFile,
		"--verdict-public-key-file="+e.publicKeyFile, "--probe-address="+probeAddr, "--metrics-address="+metricsAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		// Killed: on SIGTERM it would drain for as long as Services name its node.
		if err := p.Kill(); err != nil {
			b.Errorf("kill baremetal-agent: %v", err)
		}
		if b.Failed() {
			b.Logf("baremetal-agent log:\n%s", p.Tail(50))
		}
	}()
	start := time.Now()
	var got int
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.Exited():
			return false, fmt.Errorf("the agent exited: %v", p.ExitError())
		default:
		}
		if code, _ := get(ctx, metricsAddr, "/readyz"); code != http.StatusOK {
			return false, nil
		}
		_, metrics := get(ctx, metricsAddr, "/metrics")
		got = refused(metrics)
		return got == want, nil
	})
	if err != nil {
		b.Fatalf("agent not done within 5 minutes (%d of %d Services refused): %v", got, want, err)
	}
	b.Logf("%s ready and done with %d Services in %s", filepath.Base(binary), n, time.Since(start).Round(time.Millisecond))
	rss, err := p.PeakRSS()
	if err != nil {
		b.Fatal(err)
	}
	mib := float64(rss) / (1 << 20)
	b.Logf("%s peak RSS with %d Services: %.1f MiB", filepath.Base(binary), n, mib)
	return mib
}

// refused returns the sum of baremetal_agent_refused_addresses in a metrics page.
func refused(metrics string) int {
	sum := 0
	for _, line := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(line, "baremetal_agent_refused_addresses{"); ok {
			if _, value, ok := strings.Cut(rest, "} "); ok {
				v, _ := strconv.ParseFloat(value, 64)
				sum += int(v)
			}
		}
	}
	return sum
}

func get(ctx context.Context, addr, path string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// freePort returns a loopback address with a port free for network ("tcp" or "udp").
func freePort(b *testing.B, network string) string {
	var addr string
	if network == "udp" {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr = l.LocalAddr().String()
		l.Close()
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	}
	return addr
}
