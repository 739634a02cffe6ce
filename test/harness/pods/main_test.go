package pods_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// setup returns an admin client of the shared control plane, a fresh namespace, and a
// network of n nodes registered as Nodes, as the testbed registers them.
func setup(t *testing.T, nodes int) (kubernetes.Interface, string, *netns.Network) {
	t.Helper()
	netns.RequireRoot(t)
	cp := controlplane.Shared(t)
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Left behind: without a controller-manager a deleted namespace stays Terminating
	// anyway, and the control plane goes at the end.
	ns, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pods-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	n := netns.ForTest(t, nodes)
	for _, h := range n.Nodes {
		registerNode(t, admin, h)
	}
	return admin, ns.Name, n
}

// registerNode creates the Node of h unless a test before did: every network names its
// nodes node1, node2, …, and the control plane is shared.
func registerNode(t *testing.T, admin kubernetes.Interface, h *netns.Host) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Label}}
	_, err := admin.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create Node %s: %v", h.Label, err)
	}
}
