// Package integration tests the cloud provider against a real kube-apiserver and etcd,
// shared by all tests of the package (see package controlplane).
package integration

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// setup returns the shared control plane, an admin client for it and a fresh namespace
// for the test.
func setup(t *testing.T) (*controlplane.ControlPlane, kubernetes.Interface, string) {
	t.Helper()
	cp := controlplane.Shared(t)
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The namespace is left behind: without a controller-manager, a deleted namespace
	// would stay Terminating forever anyway, and the control plane goes at the end.
	ns, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return cp, admin, ns.Name
}
