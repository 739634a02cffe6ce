package e2e

import (
	"bytes"
	"context"
	"fmt"
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
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubeproxy"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/node"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// Environment of the install test, which make test sets: the version the images of
// BAREMETAL_IMAGES were built as, and the directory of the pause image's archive.
const (
	imageVersionEnv = "BAREMETAL_IMAGE_VERSION"
	nodeImagesEnv   = "BAREMETAL_NODE_IMAGES"
)

// installControllers are the controllers of kube-controller-manager that an install
// needs: the workloads' (a Deployment's ReplicaSets and Pods, a DaemonSet's Pods), the
// ServiceAccounts and the CA ConfigMap of each namespace that the ServiceAccount admission
// plugin and the Pods' token volumes need, the node lifecycle controller that lifts the
// not-ready taint a kubelet registers its node with, and what a deletion needs (the
// namespace's contents, the garbage collector's dependents).
var installControllers = []string{
	"deployment-controller", "replicaset-controller", "daemonset-controller",
	"serviceaccount-controller", "root-ca-certificate-publisher-controller",
	"node-lifecycle-controller", "namespace-controller", "garbage-collector-controller",
	"endpointslice-controller",
}

// TestInstall follows docs/install.md's Install as an operator would, on nodes that run
// the real kubelet and containerd: it writes a release from the archives of make images,
// runs the page's own commands (the probe key, sha256sum -c, the edit of install.yaml, kubectl
// apply, rollout status) with the kubectl of the tools module, loads the images on every
// node as the page's Images section says, and then sees a Service's address given, announced
// by the node the ccm chose, and failed over when that node's agent is deleted. Last it
// runs the page's Uninstall and sees the ccm's and the agents' pods gone.
func TestInstall(t *testing.T) {
	netns.RequireRoot(t)
	imagesDir, version, pauseArchive := os.Getenv(imagesEnv), os.Getenv(imageVersionEnv), filepath.Join(os.Getenv(nodeImagesEnv), "baremetal-pause.oci.tar")
	if imagesDir == "" || version == "" || os.Getenv(nodeImagesEnv) == "" {
		if ci.Running() {
			t.Fatalf("%s, %s and %s must be set: make test sets them", imagesEnv, imageVersionEnv, nodeImagesEnv)
		}
		t.Skipf("%s, %s and %s are not set: run make images node-images, and the test with them", imagesEnv, imageVersionEnv, nodeImagesEnv)
	}
	ctx := t.Context()
	release := writeRelease(t, version, imagesDir)

	// A control plane of its own: the ServiceAccount admission plugin on, so that Pods
	// get their token volume, as in every cluster.
	cp := controlplane.StartForTest(t, controlplane.WithAPIServerFlag("disable-admission-plugins", ""))
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	controlplane.ControllerManagerForTest(t, cp, installControllers...)
	controlplane.SchedulerForTest(t, cp)

	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, admin)
		}
	})
	network := netns.ForTest(t, 2)
	api, serverName := apiForNodes(t, cp, network, admin)
	nodes := startNodes(t, cp, network, admin, api, serverName, pauseArchive)

	// docs/install.md, Install, step 4: the images, from the release's archives, on every node.
	images := releaseImages(t, filepath.Join(release, "install.yaml"))
	for _, n := range nodes {
		for archive, ref := range images {
			name, err := n.Import(ctx, filepath.Join(release, archive))
			if err != nil {
				t.Fatal(err)
			}
			repo, _, _ := strings.Cut(ref, ":")
			if _, err := n.Ctr(ctx, "images", "tag", name, repo+"@"+strings.SplitN(ref, "@", 2)[1]); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The page's commands, as they are written, in the release's directory.
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := install.WriteKubeconfig(cp.AdminConfig(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	shell := readmeShell(t, release, kubeconfig)
	blocks := installBlocks(t)
	shell(t, blocks.probeKey)
	shell(t, blocks.apply)

	// A Service, given an address and announced.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80}},
		},
	}
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addr, announcer := waitAnnounced(t, admin, "")
	waitResolves(t, network, addr, announcer)

	// The announcer's agent deleted: its DaemonSet starts another, which drains first
	// on SIGTERM; the address moves to the other node meanwhile.
	pods, err := admin.CoreV1().Pods("baremetal-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + announcer, LabelSelector: "app.kubernetes.io/name=baremetal-agent"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the agent pod on %s: %v, %d found", announcer, err, len(pods.Items))
	}
	if err := admin.CoreV1().Pods("baremetal-system").Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, next := waitAnnounced(t, admin, announcer)
	waitResolves(t, network, addr, next)

	// docs/install.md, Uninstall: the Services first, then everything install.yaml made.
	if err := admin.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (bool, error) {
		_, err := admin.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), client(err)
	}, "the Service web, its finalizer removed by the ccm")
	shell(t, blocks.uninstall)
	waitFor(t, func() (bool, error) {
		_, err := admin.CoreV1().Namespaces().Get(ctx, "baremetal-system", metav1.GetOptions{})
		return apierrors.IsNotFound(err), client(err)
	}, "the namespace baremetal-system")
	for _, n := range nodes {
		var left string
		waitFor(t, func() (bool, error) {
			out, err := n.Ctr(ctx, "containers", "list", "-q")
			left = strings.Join(strings.Fields(out), " ")
			return err == nil && left == "", err
		}, "no container left on a node", &left)
	}
}

// client is err unless it says only that the object is gone.
func client(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeRelease writes the release version from the archives in imagesDir, as make release
// does once it has built them, and returns its directory.
func writeRelease(t *testing.T, version, imagesDir string) string {
	t.Helper()
	root, err := render.ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), version)
	cmd := exec.CommandContext(t.Context(), "go", "run", "./hack/release", "-version", version, "-images", imagesDir, "-out", out)
	cmd.Dir = filepath.Dir(root)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write the release: %v\n%s", err, b)
	}
	return out
}

// apiForNodes makes the API server reachable from the nodes: at a forwarder on the
// bridge, which the kubelets are given, and at the kubernetes Service's ClusterIP, which
// pods get from the kubelet and kube-proxy sends to that forwarder. It returns the
// forwarder's address and the name in the API server's certificate.
func apiForNodes(t *testing.T, cp *controlplane.ControlPlane, network *netns.Network, admin kubernetes.Interface) (netip.AddrPort, string) {
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

// startNodes runs containerd, the kubelet and kube-proxy on every node of net, and
// returns once every Node is Ready.
func startNodes(t *testing.T, cp *controlplane.ControlPlane, network *netns.Network, admin kubernetes.Interface, api netip.AddrPort, serverName, pauseArchive string) []*node.Node {
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
	proxyKubeconfig := nodeKubeconfig(t, proxy, api, serverName, "kube-proxy")
	var nodes []*node.Node
	for _, h := range network.Nodes {
		// In a cluster the nodes' default route covers the Service range; kube-proxy
		// sends what goes there on to its endpoints.
		for _, r := range []string{"10.96.0.0/16", "fd00:10:96::/112"} {
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
			Kubeconfig:   nodeKubeconfig(t, cfg, api, serverName, "kubelet-"+h.Label),
			PauseArchive: pauseArchive,
			PodSubnet:    h.PodSubnet4,
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
		nodes = append(nodes, n)
	}
	for _, h := range network.Nodes {
		waitFor(t, func() (bool, error) {
			n, err := admin.CoreV1().Nodes().Get(ctx, h.Label, metav1.GetOptions{})
			if err != nil {
				return false, client(err)
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		}, "node "+h.Label+" Ready")
		kp, err := kubeproxy.Start(ctx, h, kubeproxy.Config{
			NodeName:     h.Label,
			Kubeconfig:   proxyKubeconfig,
			ClusterCIDRs: []netip.Prefix{network.PodSubnet4, network.PodSubnet6},
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
	return nodes
}

// nodeKubeconfig writes a kubeconfig of cfg's credentials that reaches the API server at
// api, from inside the nodes, and returns its path.
func nodeKubeconfig(t *testing.T, cfg *rest.Config, api netip.AddrPort, serverName, name string) string {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + api.String()
	cfg.ServerName = serverName
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := install.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// releaseImages returns, for each image archive of a release, the reference its
// install.yaml runs: <repository>:<tag>@<digest>.
func releaseImages(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+image: (\S+/(baremetal-[a-z]+):\S+@sha256:[0-9a-f]{64})$`).FindAllStringSubmatch(string(data), -1) {
		images[m[2]+".oci.tar"] = m[1]
	}
	if len(images) != 2 {
		t.Fatalf("%s runs the images %v, want one of each program", path, images)
	}
	return images
}

// readmeBlocks are the shell blocks of the install page's Install section that the test
// runs.
type readmeBlocks struct {
	probeKey, apply, uninstall string
}

// installBlocks reads the shell blocks of the Install section of docs/install.md: the
// probe key (step 3), kubectl apply, and Uninstall's kubectl delete.
func installBlocks(t *testing.T) readmeBlocks {
	t.Helper()
	root, err := render.ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(root), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	start := strings.Index(section, "\n## Install\n")
	if start < 0 {
		t.Fatal("docs/install.md has no Install section")
	}
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var b readmeBlocks
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		block := m[1]
		switch {
		case strings.Contains(block, "create secret generic baremetal-probe-key"):
			b.probeKey = block
		case strings.Contains(block, "kubectl apply -f install.yaml"):
			b.apply = block
		case strings.Contains(block, "kubectl delete -f install.yaml"):
			b.uninstall = block
		}
	}
	if b.probeKey == "" || b.apply == "" || b.uninstall == "" {
		t.Fatalf("docs/install.md's Install section lacks a block of the probe key, kubectl apply or kubectl delete: %+v", b)
	}
	return b
}

// readmeShell returns a function that runs a block of the install page's commands with sh -e in
// dir, with the tools module's kubectl on PATH, the admin kubeconfig, and an $EDITOR that
// puts this test's cloud-config into install.yaml.
func readmeShell(t *testing.T, dir, kubeconfig string) func(*testing.T, string) {
	t.Helper()
	bin, err := controlplane.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	editor := filepath.Join(t.TempDir(), "editor")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=1 %q \"$@\"\n", editInstallEnv, self)
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, block string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ex", "-c", block)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig, "EDITOR="+editor)
		out, err := cmd.CombinedOutput()
		t.Logf("docs/install.md's\n%s\n%s", block, out)
		if err != nil {
			t.Fatalf("docs/install.md's commands failed: %v", err)
		}
	}
}

// waitAnnounced waits until the Service default/web has an address and an announcer
// other than not, and returns both.
func waitAnnounced(t *testing.T, admin kubernetes.Interface, not string) (netip.Addr, string) {
	t.Helper()
	var addr netip.Addr
	var announcer string
	waitFor(t, func() (bool, error) {
		svc, err := admin.CoreV1().Services("default").Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ingress := svc.Status.LoadBalancer.Ingress
		announcer = svc.Annotations[annotation.Announcer]
		if len(ingress) == 0 || announcer == "" || announcer == not {
			return false, nil
		}
		addr, err = netip.ParseAddr(ingress[0].IP)
		return err == nil, err
	}, "the Service web announced by a node other than "+strconv.Quote(not))
	return addr, announcer
}

// waitResolves waits until the client's kernel, asked anew, resolves addr to the MAC of
// the node called label.
func waitResolves(t *testing.T, network *netns.Network, addr netip.Addr, label string) {
	t.Helper()
	want := hostByLabel(t, network, label).MAC
	var got string
	waitFor(t, func() (bool, error) {
		if err := network.Client.FlushNeighbors(); err != nil {
			return false, err
		}
		// The reply does not matter: the request makes the kernel resolve addr.
		_ = network.Client.Ping(addr, 200*time.Millisecond)
		mac, _, err := network.Client.Neighbor(addr)
		got = mac.String()
		return bytes.Equal(mac, want), err
	}, fmt.Sprintf("%s to resolve to %s, the MAC of %s", addr, want, label), &got)
}

// hostByLabel returns the node of net called label.
func hostByLabel(t *testing.T, network *netns.Network, label string) *netns.Host {
	t.Helper()
	for _, h := range network.Nodes {
		if h.Label == label {
			return h
		}
	}
	t.Fatalf("no node %q", label)
	return nil
}

// waitFor waits up to two minutes for done to report true, failing on its error. A
// timeout names what, and what *last holds then, when done keeps its last state there.
func waitFor(t *testing.T, done func() (bool, error), what string, last ...*string) {
	t.Helper()
	poll.Until(t, 2*time.Minute, func(context.Context) (bool, string) {
		ok, err := done()
		if err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		why := what
		for _, l := range last {
			why += " (last: " + *l + ")"
		}
		return ok, why
	})
}

// editInstallEnv, set, makes the test binary the $EDITOR of the install page's commands: it puts
// the test's cloud-config into the install.yaml it is given, as an operator does by hand.
const editInstallEnv = "BAREMETAL_E2E_EDIT_INSTALL"

// editInstall puts the test's cloud-config into the ConfigMap of the install.yaml at
// path: what the page's `$EDITOR install.yaml` asks of an operator.
func editInstall(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := strings.Split(string(data), "\n---\n")
	edited := false
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		if name, _ := meta["name"].(string); obj["kind"] != "ConfigMap" || !strings.HasPrefix(name, "cloud-config") {
			continue
		}
		obj["data"] = map[string]any{"cloud-config.yaml": cloudConfig}
		out, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		docs[i], edited = string(out), true
	}
	if !edited {
		return fmt.Errorf("%s has no ConfigMap cloud-config-<hash>", path)
	}
	return os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644)
}

// logPods logs the phase and conditions of every pod, and the states of its containers.
func logPods(t *testing.T, admin kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		out, _ := yaml.Marshal(p.Status)
		t.Logf("pod %s/%s on %q:\n%s", p.Namespace, p.Name, p.Spec.NodeName, out)
	}
}
