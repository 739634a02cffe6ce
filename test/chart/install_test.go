package chart

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// node is the one Node of the test, whose agent answers the ccm's probes on loopback.
const node = "node-a"

// pool is the test's only pool: on no interface of the machine, so the agent sends
// nothing for it on any network (and tells the ccm it cannot announce it: the Service
// gets no announcer).
var pool = netip.MustParsePrefix("198.18.100.0/28")

// TestInstall applies the chart's rendering to a real control plane, as `helm install`
// would, and runs both programs as its pods would: with their containers' arguments and
// environment, the files of the ConfigMap and Secret the chart renders at the place of
// their mounts, and the tokens of the chart's ServiceAccounts. The ccm gives a
// LoadBalancer Service an address from the chart's cloud-config and takes the agent for
// up, which it can only do if the agent answers probes made with the chart's key; and
// both export every series the chart's alerts read.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	probePort := freePort(t, "udp")
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, fmt.Appendf(nil, `
cloudConfig:
  config:
    pools:
    - name: default
      addresses: [%s]
    failover:
      probeInterval: 100ms
      failureThreshold: 3
      agentPort: %d
probeKey:
  create: true
verdictKey:
  create: true
`, pool, probePort), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "--values", values, "--set-file", "verdictKey.public=testdata/verdict.pub", "--set-file", "verdictKey.private=testdata/verdict.key")
	alertRules := find(t, renderChart(t, "--set", "prometheusRule.enabled=true"), "PrometheusRule", "cloud-provider-baremetal")

	cp := controlplane.Shared(t)
	ctx := t.Context()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// What `helm install --create-namespace` does before it applies the chart.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := install.ApplyObjects(ctx, cp.AdminConfig(), objs); err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	agentMetrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "tcp")))
	agent := startPod(t, cp, objs, find(t, objs, "DaemonSet", "baremetal-agent"), filepath.Join(dir, "agent"), "baremetal-agent",
		"--metrics-address="+agentMetrics,
		fmt.Sprintf("--probe-address=127.0.0.1:%d", probePort),
		// On SIGTERM it would drain while the Service names its node.
		"--shutdown-grace-period=1s")
	poll.Until(t, 30*time.Second, func(ctx context.Context) (bool, string) {
		code, body, err := install.Get(ctx, http.DefaultClient, "http://"+agentMetrics+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("the agent's /readyz: %d %s %v", code, body, err)
	}, agent)

	ccmPort := freePort(t, "tcp")
	ccm := startPod(t, cp, objs, find(t, objs, "Deployment", "baremetal-ccm"), filepath.Join(dir, "ccm"), "baremetal-ccm",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ccmPort),
		"--cert-dir="+filepath.Join(dir, "ccm", "certs"),
		// Off: its default port is one for the whole machine.
		"--status-address=")

	svc, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			Ports:                         []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			AllocateLoadBalancerNodePorts: ptr.To(false),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, func(ctx context.Context) (bool, string) {
		got, err := admin.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ips []string
		for _, in := range got.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		if len(ips) != 1 || !pool.Contains(netip.MustParseAddr(ips[0])) {
			return false, fmt.Sprintf("the Service has addresses %v, want one of %s", ips, pool)
		}
		return true, ""
	}, ccm, agent)

	// The ccm takes the agent for up only once it answered probes authenticated with the
	// key both read from the chart's Secret. The ccm authenticates and authorizes the
	// scrape through the API server, with the chart's auth-delegator bindings.
	var ccmText string
	poll.Until(t, 30*time.Second, func(ctx context.Context) (bool, string) {
		code, body, err := install.CCMMetrics(ctx, cp.AdminConfig(), fmt.Sprintf("127.0.0.1:%d", ccmPort))
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("the ccm's /metrics: %d %v: %s", code, err, body)
		}
		ccmText = body
		return strings.Contains(body, `baremetal_ccm_agents{state="up"} 1`+"\n"), "the ccm does not take the agent for up: " + grep(body, "baremetal_ccm_agents")
	}, ccm, agent)
	// The agent takes the ccm's first verdict only if it is signed with the private key
	// of the chart's Secret, checked with the public key of the other.
	var agentText string
	poll.Until(t, 10*time.Second, func(ctx context.Context) (bool, string) {
		_, body, err := install.Get(ctx, http.DefaultClient, "http://"+agentMetrics+"/metrics")
		if err != nil {
			return false, fmt.Sprintf("the agent's metrics: %v", err)
		}
		agentText = body
		const taken = `baremetal_agent_verdicts_total{result="taken"} `
		return strings.Contains(body, taken) && !strings.Contains(body, taken+"0\n"), "the agent has taken no verdict: " + grep(body, "baremetal_agent_verdicts_total") + grep(body, "baremetal_agent_unsigned")
	}, ccm, agent)
	if want := `leader_election_master_status{name="baremetal-ccm"} 1`; !strings.Contains(ccmText, want) {
		t.Errorf("the ccm's metrics lack %s, which BaremetalCCMNoLeader reads", want)
	}
	names := alertMetrics(t, alertRules)
	for _, name := range names {
		if !exported(ccmText, name) && !exported(agentText, name) {
			t.Errorf("the alerts read %s, which neither program exports", name)
		}
	}
	t.Logf("the alerts read %s", strings.Join(names, ", "))
}

// startPod runs the program of a workload's container as its pod would, with extra
// arguments for the test, until the test ends: the files of its volumes are written
// under dir from the ConfigMaps and Secrets of objs and its arguments pointed there, its
// environment's field references are filled in, and it authenticates as the pod's
// ServiceAccount.
func startPod(t *testing.T, cp *controlplane.ControlPlane, objs []*unstructured.Unstructured, w *unstructured.Unstructured, dir, binary string, extraArgs ...string) *process.Process {
	t.Helper()
	ctx := t.Context()
	pod, _, _ := unstructured.NestedMap(w.Object, "spec", "template", "spec")
	c := container(t, w)
	volumes := map[string]map[string]any{}
	for _, v := range pod["volumes"].([]any) {
		volumes[v.(map[string]any)["name"].(string)] = v.(map[string]any)
	}
	args := stringList(c["args"])
	for _, m := range c["volumeMounts"].([]any) {
		name, mountPath := m.(map[string]any)["name"].(string), m.(map[string]any)["mountPath"].(string)
		local := filepath.Join(dir, "volumes", name)
		files, err := volumeFiles(objs, volumes[name])
		if err != nil {
			t.Fatalf("%s %s: volume %s: %v", w.GetKind(), w.GetName(), name, err)
		}
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		for file, data := range files {
			if err := os.WriteFile(filepath.Join(local, file), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], mountPath+"/", local+"/")
		}
	}
	// The downward API's fields, as the kubelet fills them in.
	fields := map[string]string{"metadata.namespace": w.GetNamespace(), "spec.nodeName": node}
	var env []string
	envList, _ := c["env"].([]any)
	for _, e := range envList {
		name := e.(map[string]any)["name"].(string)
		field, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
		value, ok := fields[field]
		if !ok {
			t.Fatalf("%s %s: env %s: the test fills in no field %q", w.GetKind(), w.GetName(), name, field)
		}
		env = append(env, name+"="+value)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "$("+name+")", value)
		}
	}

	sa, err := cp.ServiceAccountConfig(ctx, w.GetNamespace(), pod["serviceAccountName"].(string))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := install.WriteKubeconfig(sa, kubeconfig); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	if binary == "baremetal-ccm" {
		// In a pod these default to the in-cluster credentials.
		args = append(args, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig)
	}
	path, err := install.Binary(dir, binary)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, append(args, extraArgs...)...)
	cmd.Env = append(os.Environ(), env...)
	p, err := process.StartCmd(binary, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil && !strings.Contains(err.Error(), "had exited") {
			t.Errorf("stop %s: %v", binary, err)
		}
		if t.Failed() {
			t.Logf("%s %s log:\n%s", binary, strings.Join(cmd.Args[1:], " "), p.Logs())
		}
	})
	return p
}

// volumeFiles returns the files a pod volume holds, from the ConfigMap or Secret of objs
// it names.
func volumeFiles(objs []*unstructured.Unstructured, volume map[string]any) (map[string][]byte, error) {
	kind, name, field := "ConfigMap", "", "data"
	if n, ok, _ := unstructured.NestedString(volume, "configMap", "name"); ok {
		name = n
	} else if n, ok, _ := unstructured.NestedString(volume, "secret", "secretName"); ok {
		kind, name = "Secret", n
	} else {
		return nil, fmt.Errorf("neither a ConfigMap nor a Secret: %v", volume)
	}
	for _, o := range objs {
		if o.GetKind() != kind || o.GetName() != name {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, field)
		files := map[string][]byte{}
		for k, v := range data {
			files[k] = []byte(v)
			if kind == "Secret" {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return nil, fmt.Errorf("Secret %s: %s: %w", name, k, err)
				}
				files[k] = b
			}
		}
		return files, nil
	}
	return nil, fmt.Errorf("the chart renders no %s %s", kind, name)
}

// metricName is a name of the project's series, or of the leader-election gauge, in a
// PromQL expression.
var metricName = regexp.MustCompile(`\b(baremetal_[a-z0-9_]+|leader_election_[a-z0-9_]+)\b`)

// alertMetrics returns the series names the PrometheusRule's expressions read.
func alertMetrics(t *testing.T, rule *unstructured.Unstructured) []string {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	seen := map[string]bool{}
	var names []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			expr, _, _ := unstructured.NestedString(r.(map[string]any), "expr")
			for _, name := range metricName.FindAllString(expr, -1) {
				if !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("the PrometheusRule's expressions read no series of the project")
	}
	return names
}

// exported reports whether text, in the Prometheus text format, holds a sample of the
// series name.
func exported(text, name string) bool {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			return true
		}
	}
	return false
}

// grep returns the lines of text that hold s.
func grep(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "; ")
}

// freePort returns a loopback port that was free a moment ago for network, "tcp" or "udp".
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
