// Package pods runs stand-ins for Kubernetes pods on the nodes of a test network (package
// netns): each is a pod namespace of its node (netns.Network.AddPod) with a server in it
// (traffic.ServePod, answering with the pod's name, its node and the client address it
// saw), and a Pod object on a real API server whose status this package writes as the
// node's kubelet would. No kubelet, container runtime or scheduler runs; the server is a
// goroutine of the test binary listening inside the pod's namespace.
//
// What the real EndpointSlice controller needs of a Pod to list it as an endpoint of a
// Service, and what Create provides:
//
//   - labels matching the Service's selector, in the Service's namespace (Spec.Labels);
//   - a phase that is not terminal (Running) and status.podIPs, one per family: the
//     controller takes the endpoint addresses of an IPv4 or IPv6 EndpointSlice from
//     podIPs only, never from podIP;
//   - spec.nodeName naming a Node that exists: the controller leaves out a Pod whose Node
//     it does not know (Create refuses to make one), and copies the Node's
//     topology.kubernetes.io/zone label into the endpoint;
//   - the Ready condition: an endpoint is ready and serving while it is True, and ready
//     false but still listed while it is False (SetReady); a Pod with a deletion
//     timestamp would be listed as terminating, but Delete removes the Pod at once;
//   - a container port named as the Service's targetPort, when that is a name
//     (Spec.PortName); a numeric targetPort needs no container port at all.
package pods

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// Image is the image of the one container of every Pod this package creates. Nothing
// pulls it, as no kubelet runs; its registry is in the .invalid domain (RFC 2606), so
// that nothing ever could, and its name says what it is.
const Image = "registry.invalid/cloud-provider-baremetal/test-pod-stand-in:none"

// ContainerName is the name of that container.
const ContainerName = "server"

// Spec is what Create makes.
type Spec struct {
	// Namespace and Name are the Pod's; Name is also the pod namespace's Label.
	Namespace, Name string
	// Labels are the Pod's labels, which Services select it by.
	Labels map[string]string
	// Port is where the pod's server listens, on IPv4 and IPv6, and the container port
	// of the Pod.
	Port int32
	// PortName, if set, names the container port, for Services whose targetPort is a
	// name. It must be an IANA service name: at most 15 lowercase letters, digits and
	// '-'.
	PortName string
	// NotReady creates the Pod running but not ready, as a kubelet reports it until the
	// first readiness probe passes. SetReady changes it.
	NotReady bool
}

// A Pod is a running stand-in pod. Its methods are safe for concurrent use.
type Pod struct {
	// Namespace and Name are the Pod object's.
	Namespace, Name string
	// Host is the pod's network namespace: its eth0 addresses, IPv4 and IPv6, are the
	// Pod's podIPs.
	Host *netns.Host
	// Node is the node the pod runs on; its Label is the Pod's spec.nodeName.
	Node *netns.Host
	// Port is where the pod's server listens.
	Port int32

	client    kubernetes.Interface
	network   *netns.Network
	listeners []net.Listener
	serving   sync.WaitGroup
}

// statusTimeout bounds each request Create, SetReady and Delete make of the API server,
// should the caller's context have no deadline.
const statusTimeout = 30 * time.Second

// Create starts a pod as spec says on node, a node of network, and returns once its
// server answers and its Pod object on the API server that client (an admin) reaches
// is Running, with the status a kubelet writes: phase Running, the node's addresses
// as hostIP and hostIPs, the pod's as podIP and podIPs (IPv4 first, as the cluster's
// families are ordered), the conditions PodReadyToStartContainers, Initialized,
// Ready, ContainersReady and PodScheduled, and a running container. The Node named
// node.Label must exist. On error nothing of the pod is left behind, as far as the API
// server lets Create remove it.
func Create(ctx context.Context, client kubernetes.Interface, network *netns.Network, node *netns.Host, spec Spec) (_ *Pod, err error) {
	if spec.Namespace == "" || spec.Name == "" {
		return nil, fmt.Errorf("create pod %s/%s: namespace and name must be set", spec.Namespace, spec.Name)
	}
	if spec.Port < 1 || spec.Port > 65535 {
		return nil, fmt.Errorf("create pod %s/%s: port %d: want 1 to 65535", spec.Namespace, spec.Name, spec.Port)
	}
	if node == nil {
		return nil, fmt.Errorf("create pod %s/%s: no node", spec.Namespace, spec.Name)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// The EndpointSlice controller would leave the pod out without a word.
	if _, err := client.CoreV1().Nodes().Get(ctx, node.Label, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("create pod %s/%s on %s: the Node must exist for the EndpointSlice controller to list the pod: %w", spec.Namespace, spec.Name, node.Label, err)
	}

	host, err := network.AddPod(node, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	p := &Pod{Namespace: spec.Namespace, Name: spec.Name, Host: host, Node: node, Port: spec.Port, client: client, network: network}
	objectCreated := false
	defer func() {
		if err == nil {
			return
		}
		if objectCreated {
			err = errors.Join(err, p.Delete(context.Background()))
		} else {
			// Not Delete: a Pod of that name that was there before is not ours.
			err = errors.Join(err, p.stop())
		}
	}()
	// Two sockets rather than one for both families, so that IPv4 clients show as
	// themselves rather than as IPv4-mapped IPv6 addresses.
	for _, l := range []struct{ network, addr string }{{"tcp4", "0.0.0.0"}, {"tcp6", "::"}} {
		ln, err := host.Listen(l.network, net.JoinHostPort(l.addr, fmt.Sprint(spec.Port)))
		if err != nil {
			return nil, fmt.Errorf("create pod %s/%s: server: %w", spec.Namespace, spec.Name, err)
		}
		p.listeners = append(p.listeners, ln)
		p.serving.Go(func() { traffic.ServePod(ln, spec.Name, node.Label) })
	}

	port := corev1.ContainerPort{Name: spec.PortName, ContainerPort: spec.Port, Protocol: corev1.ProtocolTCP}
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: spec.Namespace, Name: spec.Name, Labels: spec.Labels},
		Spec: corev1.PodSpec{
			NodeName:   node.Label,
			Containers: []corev1.Container{{Name: ContainerName, Image: Image, Ports: []corev1.ContainerPort{port}}},
		},
	}
	// Created as a kubelet finds it, Pending and without addresses; the status update
	// that follows is the kubelet's once the sandbox and the container run.
	obj, err = client.CoreV1().Pods(spec.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	objectCreated = true
	obj.Status = p.runningStatus(obj, !spec.NotReady, metav1.Now())
	if _, err := client.CoreV1().Pods(spec.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("update the status of Pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	return p, nil
}

// withTimeout bounds ctx by statusTimeout unless it has a deadline already.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, statusTimeout)
}

// runningStatus returns the status a kubelet writes for obj once its container runs,
// ready or not, with now as the time of every transition. The QoS class is the API
// server's, which may not change.
func (p *Pod) runningStatus(obj *corev1.Pod, ready bool, now metav1.Time) corev1.PodStatus {
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now, ObservedGeneration: obj.Generation}
		if !ok {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: ["+ContainerName+"]"
		}
		return c
	}
	return corev1.PodStatus{
		ObservedGeneration: obj.Generation,
		Phase:              corev1.PodRunning,
		// In the order a kubelet writes them.
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true),
			cond(corev1.PodInitialized, true),
			cond(corev1.PodReady, ready),
			cond(corev1.ContainersReady, ready),
			cond(corev1.PodScheduled, true),
		},
		HostIP:    p.Node.IPv4.String(),
		HostIPs:   []corev1.HostIP{{IP: p.Node.IPv4.String()}, {IP: p.Node.IPv6.String()}},
		PodIP:     p.Host.IPv4.String(),
		PodIPs:    []corev1.PodIP{{IP: p.Host.IPv4.String()}, {IP: p.Host.IPv6.String()}},
		StartTime: &now,
		QOSClass:  obj.Status.QOSClass,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        ContainerName,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			Ready:       ready,
			Started:     ptr.To(true),
			Image:       Image,
			ContainerID: "stand-in://" + p.Namespace + "/" + p.Name,
		}},
	}
}

// IPs returns the pod's addresses, IPv4 first: its podIPs.
func (p *Pod) IPs() []netip.Addr { return []netip.Addr{p.Host.IPv4, p.Host.IPv6} }

// Get returns the Pod object as the API server has it.
func (p *Pod) Get(ctx context.Context) (*corev1.Pod, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	obj, err := p.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return obj, nil
}

// SetReady reports the pod ready or not, as a kubelet does when the container's
// readiness probe starts to pass or to fail: it updates the status only, the Ready and
// ContainersReady conditions (with the time of the transition) and the container's
// ready flag. The phase stays Running and the server keeps answering: only the
// endpoint's readiness changes. Like a kubelet, it writes nothing if the pod already is
// as asked.
func (p *Pod) SetReady(ctx context.Context, ready bool) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	status := corev1.ConditionFalse
	reason, message := "ContainersNotReady", "containers with unready status: ["+ContainerName+"]"
	if ready {
		status, reason, message = corev1.ConditionTrue, "", ""
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := p.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		now := metav1.Now()
		for i := range obj.Status.Conditions {
			c := &obj.Status.Conditions[i]
			if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status != status {
				c.Status, c.Reason, c.Message, c.LastTransitionTime = status, reason, message, now
				c.ObservedGeneration = obj.Generation
				changed = true
			}
		}
		for i := range obj.Status.ContainerStatuses {
			if cs := &obj.Status.ContainerStatuses[i]; cs.Ready != ready {
				cs.Ready, changed = ready, true
			}
		}
		if !changed {
			return nil
		}
		_, err = p.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set Pod %s/%s ready %v: %w", p.Namespace, p.Name, ready, err)
	}
	return nil
}

// Delete deletes the Pod object with grace period 0, so that it is gone at once (no
// kubelet would ever confirm that the containers stopped), then stops the server and
// removes the pod's namespace. Deleting again does nothing; every step is tried even if
// one before failed.
func (p *Pod) Delete(ctx context.Context) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var errs []error
	err := p.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete Pod %s/%s: %w", p.Namespace, p.Name, err))
	}
	return errors.Join(append(errs, p.stop())...)
}

// stop stops the server and removes the pod's namespace.
func (p *Pod) stop() error {
	for _, l := range p.listeners {
		// A second Close says it is closed already: nothing to report.
		l.Close()
	}
	p.serving.Wait()
	if err := p.network.RemovePod(p.Host); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// ForTest creates a pod as Create does and deletes it when the test ends, failing the
// test if either fails.
func ForTest(t testing.TB, client kubernetes.Interface, network *netns.Network, node *netns.Host, spec Spec) *Pod {
	t.Helper()
	p, err := Create(t.Context(), client, network, node, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The test's context is done by now.
		if err := p.Delete(context.Background()); err != nil {
			t.Errorf("delete pod: %v", err)
		}
	})
	return p
}
