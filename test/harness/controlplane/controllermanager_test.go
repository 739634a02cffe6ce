package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// endpointWait bounds each wait for the EndpointSlice controller. It acts within a second
// or so; the bound only ends a test whose controller never does.
const endpointWait = 30 * time.Second

// The real EndpointSlice controller puts a Pod that a kubelet reports ready into its
// Service's EndpointSlice, and marks it not ready when the kubelet says so. No kubelet
// runs: the test writes the Pod's status as one would.
func TestControllerManagerEndpointSlices(t *testing.T) {
	cp := Shared(t)
	ControllerManagerForTest(t, cp)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx := t.Context()
	ns := metav1.NamespaceDefault

	// The controller leaves out Pods whose Node does not exist.
	node := createNode(t, admin, "endpointslice-")
	app := "endpointslice-" + strings.TrimPrefix(node.Name, "endpointslice-")
	svc, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.CoreV1().Services(ns).Delete(deleteCtx, svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Service %s: %v", svc.Name, err)
		}
	})
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/server"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// No kubelet confirms the containers are gone: without grace period 0 the Pod
		// would stay, terminating, for good.
		err := admin.CoreV1().Pods(ns).Delete(deleteCtx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil {
			t.Errorf("delete Pod %s: %v", pod.Name, err)
		}
	})

	const podIP = "10.244.1.5"
	pod = setPodReady(t, admin, pod, podIP, true)
	slice := waitForEndpoint(t, admin, svc, func(e discoveryv1.Endpoint) bool {
		return e.Addresses[0] == podIP && ptr.Deref(e.Conditions.Ready, false)
	}, podIP+" ready")
	if got, want := slice.Labels[discoveryv1.LabelManagedBy], "endpointslice-controller.k8s.io"; got != want {
		t.Errorf("EndpointSlice %s is managed by %q, want %q", slice.Name, got, want)
	}
	for _, e := range slice.Endpoints {
		if e.Addresses[0] != podIP {
			continue
		}
		if ptr.Deref(e.NodeName, "") != node.Name || e.TargetRef == nil || e.TargetRef.Name != pod.Name {
			t.Errorf("endpoint %s: node %q, target %v; want node %s, Pod %s", podIP, ptr.Deref(e.NodeName, ""), e.TargetRef, node.Name, pod.Name)
		}
	}
	if len(slice.Ports) != 1 || ptr.Deref(slice.Ports[0].Port, 0) != 8080 || ptr.Deref(slice.Ports[0].Name, "") != "http" {
		t.Errorf("EndpointSlice %s has ports %v, want http 8080", slice.Name, slice.Ports)
	}

	setPodReady(t, admin, pod, podIP, false)
	waitForEndpoint(t, admin, svc, func(e discoveryv1.Endpoint) bool {
		return e.Addresses[0] == podIP && !ptr.Deref(e.Conditions.Ready, true)
	}, podIP+" not ready")
}

// createNode creates a Node named with prefix, deleted when the test ends.
func createNode(t *testing.T, admin kubernetes.Interface, prefix string) *corev1.Node {
	t.Helper()
	node, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Node %s: %v", node.Name, err)
		}
	})
	return node
}

// setPodReady writes the status a kubelet writes for a running Pod with address ip whose
// readiness probe passes or fails.
func setPodReady(t *testing.T, admin kubernetes.Interface, pod *corev1.Pod, ip string, ready bool) *corev1.Pod {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod = pod.DeepCopy()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
		},
	}
	pod, err := admin.CoreV1().Pods(pod.Namespace).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update the status of Pod %s: %v", pod.Name, err)
	}
	return pod
}

// waitForEndpoint waits until an EndpointSlice of svc has an endpoint for which match
// holds, and returns that slice. want describes the endpoint for the failure message.
func waitForEndpoint(t *testing.T, admin kubernetes.Interface, svc *corev1.Service, match func(discoveryv1.Endpoint) bool, want string) *discoveryv1.EndpointSlice {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), endpointWait)
	defer cancel()
	selector := discoveryv1.LabelServiceName + "=" + svc.Name
	var last string
	for {
		slices, err := admin.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			last = describeSlices(slices.Items)
			for i, s := range slices.Items {
				for _, e := range s.Endpoints {
					if len(e.Addresses) > 0 && match(e) {
						return &slices.Items[i]
					}
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no EndpointSlice of Service %s lists %s after %s; last seen: %s", svc.Name, want, endpointWait, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func describeSlices(slices []discoveryv1.EndpointSlice) string {
	if len(slices) == 0 {
		return "no EndpointSlice"
	}
	var b strings.Builder
	for _, s := range slices {
		fmt.Fprintf(&b, "[%s:", s.Name)
		for _, e := range s.Endpoints {
			fmt.Fprintf(&b, " %v ready=%v", e.Addresses, ptr.Deref(e.Conditions.Ready, false))
		}
		b.WriteString("]")
	}
	return b.String()
}

// Stop of the control plane stops a controller manager the test left running, and one the
// test stopped first is no error.
func TestStopStopsControllerManager(t *testing.T) {
	if _, err := Binary("kube-controller-manager"); err != nil {
		SkipOrFail(t, err)
	}
	cp, err := Start(t.Context())
	if err != nil {
		SkipOrFail(t, err)
	}
	stopped := false
	defer func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.Logs())
		}
		if !stopped {
			_ = cp.Stop()
		}
	}()
	first, err := cp.StartControllerManager(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	second, err := cp.StartControllerManager(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if process.Alive(first.Pid()) {
		t.Errorf("kube-controller-manager %d still runs after its Stop", first.Pid())
	}
	if !strings.Contains(cp.Logs(), "kube-controller-manager (pid") {
		t.Error("the control plane's logs have no kube-controller-manager log")
	}
	stopped = true
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop of the control plane: %v", err)
	}
	if process.Alive(second.Pid()) {
		t.Errorf("kube-controller-manager %d still runs after Stop of its control plane", second.Pid())
	}
	if _, err := cp.StartControllerManager(t.Context()); err == nil {
		t.Error("StartControllerManager on a stopped control plane succeeded")
	}
}

func TestStartControllerManagerWithoutBinary(t *testing.T) {
	cp := Shared(t)
	t.Setenv(BinDirEnv, t.TempDir())
	_, err := cp.StartControllerManager(t.Context())
	if !errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("StartControllerManager without its binary: got %v, want ErrBinaryNotFound", err)
	}
}
