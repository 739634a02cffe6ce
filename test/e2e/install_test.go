package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubenodes"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// Environment of the install test, which make test sets: the version the images of
// BAREMETAL_IMAGES were built as, and the directory of the pause image's archive.
const (
	imageVersionEnv = "BAREMETAL_IMAGE_VERSION"
	nodeImagesEnv   = "BAREMETAL_NODE_IMAGES"
)

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
	release := filepath.Join(t.TempDir(), version)
	if err := install.WriteRelease(ctx, version, imagesDir, release); err != nil {
		t.Fatal(err)
	}

	// A control plane of its own: the ServiceAccount admission plugin on, so that Pods
	// get their token volume, as in every cluster.
	cp := controlplane.StartForTest(t, controlplane.WithAPIServerFlag("disable-admission-plugins", ""))
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	controlplane.ControllerManagerForTest(t, cp, kubenodes.Controllers...)
	controlplane.SchedulerForTest(t, cp)

	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, admin)
		}
	})
	network := netns.ForTest(t, 2)
	nodes := kubenodes.StartForTest(t, cp, network, pauseArchive)

	// docs/install.md, Install, step 4: the images, from the release's archives, on every node.
	images, err := install.ReleaseImages(filepath.Join(release, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for archive, ref := range images {
		repo, _, _ := strings.Cut(ref, ":")
		nodes.Import(t, filepath.Join(release, archive), repo+"@"+strings.SplitN(ref, "@", 2)[1])
	}

	// The page's commands, as they are written, in the release's directory.
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := install.WriteKubeconfig(cp.AdminConfig(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	shell := install.ShellForTest(t, release, kubeconfig, install.EditorForTest(t, cloudConfig))
	blocks, err := install.ReadBlocks()
	if err != nil {
		t.Fatal(err)
	}
	shell(t, blocks.ProbeKey)
	shell(t, blocks.Apply)

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
	shell(t, blocks.Uninstall)
	waitFor(t, func() (bool, error) {
		_, err := admin.CoreV1().Namespaces().Get(ctx, "baremetal-system", metav1.GetOptions{})
		return apierrors.IsNotFound(err), client(err)
	}, "the namespace baremetal-system")
	for _, n := range nodes.Nodes {
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
