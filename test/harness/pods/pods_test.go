package pods_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/pods"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

// condition returns the condition of type typ of obj, failing the test without one.
func condition(t *testing.T, obj *corev1.Pod, typ corev1.PodConditionType) corev1.PodCondition {
	t.Helper()
	i := slices.IndexFunc(obj.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == typ })
	if i < 0 {
		t.Fatalf("Pod %s has no %s condition: %+v", obj.Name, typ, obj.Status.Conditions)
	}
	return obj.Status.Conditions[i]
}

// checkReady checks what a kubelet's readiness report sets: the Ready and
// ContainersReady conditions, changed at or after since, and the container's ready flag;
// and that the rest of the status is still that of a running pod.
func checkReady(t *testing.T, obj *corev1.Pod, ready bool, since time.Time) {
	t.Helper()
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		c := condition(t, obj, typ)
		// The API keeps whole seconds.
		if c.Status != want || c.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
			t.Errorf("%s condition %s at %v, want %s at %v or later", typ, c.Status, c.LastTransitionTime, want, since.Truncate(time.Second))
		}
		if !ready && c.Reason != "ContainersNotReady" {
			t.Errorf("%s condition has reason %q, want ContainersNotReady", typ, c.Reason)
		}
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodScheduled} {
		if c := condition(t, obj, typ); c.Status != corev1.ConditionTrue {
			t.Errorf("%s condition %s, want True", typ, c.Status)
		}
	}
	if len(obj.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v, want one", obj.Status.ContainerStatuses)
	}
	cs := obj.Status.ContainerStatuses[0]
	if cs.Name != pods.ContainerName || cs.Ready != ready || cs.State.Running == nil || cs.Started == nil || !*cs.Started || cs.Image != pods.Image {
		t.Errorf("container status %+v, want %s running, started, ready %v", cs, pods.ContainerName, ready)
	}
	if obj.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running", obj.Status.Phase)
	}
}

// TestPodObject checks the Pod object Create makes, the status it writes as a kubelet
// would, SetReady's toggles, and Delete.
func TestPodObject(t *testing.T) {
	t.Parallel()
	admin, ns, n := setup(t, 2)
	node2 := n.Nodes[1]
	start := time.Now()
	p := pods.ForTest(t, admin, n, node2, pods.Spec{
		Namespace: ns, Name: "web-0", Labels: map[string]string{"app": "web"}, Port: 8080, PortName: "http",
	})
	if p.Host.Label != "web-0" || p.Node != node2 || p.Host.Node != node2 || p.Port != 8080 {
		t.Errorf("pod %s on %s port %d, want web-0 on node2 port 8080", p.Host.Label, p.Node.Label, p.Port)
	}
	if got, want := p.IPs(), []netip.Addr{netip.MustParseAddr("198.19.2.2"), netip.MustParseAddr("fd00:198:19:2::2")}; !slices.Equal(got, want) {
		t.Errorf("IPs() = %v, want %v", got, want)
	}

	obj, err := p.Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if obj.Namespace != ns || obj.Name != "web-0" || obj.Labels["app"] != "web" || obj.Spec.NodeName != "node2" {
		t.Errorf("Pod %s/%s labels %v on %q, want %s/web-0 app=web on node2", obj.Namespace, obj.Name, obj.Labels, obj.Spec.NodeName, ns)
	}
	if cs := obj.Spec.Containers; len(cs) != 1 || cs[0].Name != pods.ContainerName || cs[0].Image != pods.Image ||
		len(cs[0].Ports) != 1 || cs[0].Ports[0].Name != "http" || cs[0].Ports[0].ContainerPort != 8080 || cs[0].Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("containers %+v, want one %s of %s with port http 8080/TCP", cs, pods.ContainerName, pods.Image)
	}
	st := obj.Status
	if st.HostIP != "198.18.0.2" || !slices.Equal(st.HostIPs, []corev1.HostIP{{IP: "198.18.0.2"}, {IP: "fd00:198:18::2"}}) {
		t.Errorf("hostIP %s hostIPs %v, want node2's 198.18.0.2 and fd00:198:18::2", st.HostIP, st.HostIPs)
	}
	if st.PodIP != "198.19.2.2" || !slices.Equal(st.PodIPs, []corev1.PodIP{{IP: "198.19.2.2"}, {IP: "fd00:198:19:2::2"}}) {
		t.Errorf("podIP %s podIPs %v, want 198.19.2.2 and fd00:198:19:2::2", st.PodIP, st.PodIPs)
	}
	if st.StartTime == nil || st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("start time %v, QoS class %q; want a time and BestEffort", st.StartTime, st.QOSClass)
	}
	checkReady(t, obj, true, start)

	// Readiness toggles, as a probe starts to fail and to pass again.
	for _, ready := range []bool{false, true} {
		before := time.Now()
		if err := p.SetReady(t.Context(), ready); err != nil {
			t.Fatal(err)
		}
		changed, err := p.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		checkReady(t, changed, ready, before)
		scheduled := condition(t, obj, corev1.PodScheduled).LastTransitionTime
		if got := condition(t, changed, corev1.PodScheduled).LastTransitionTime; !got.Equal(&scheduled) {
			t.Errorf("PodScheduled changed at %v, want unchanged %v", got, scheduled)
		}
		// Nothing to report, nothing written.
		if err := p.SetReady(t.Context(), ready); err != nil {
			t.Fatal(err)
		}
		if again, err := p.Get(t.Context()); err != nil || again.ResourceVersion != changed.ResourceVersion {
			t.Errorf("SetReady(%v) twice wrote the Pod again (resourceVersion %s, then %s): %v", ready, changed.ResourceVersion, again.ResourceVersion, err)
		}
	}

	// Delete: the object is gone at once, and so is the pod's namespace.
	if err := p.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(t.Context(), "web-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get the Pod after Delete: %v, want not found", err)
	}
	if slices.Contains(n.Pods(), p.Host) {
		t.Error("the pod's namespace is left after Delete")
	}
	if err := p.Delete(t.Context()); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

// TestNotReadyAtStart checks Spec.NotReady: running, not ready, as before the first
// readiness probe passes.
func TestNotReadyAtStart(t *testing.T) {
	t.Parallel()
	admin, ns, n := setup(t, 1)
	start := time.Now()
	p := pods.ForTest(t, admin, n, n.Nodes[0], pods.Spec{Namespace: ns, Name: "slow", Port: 80, NotReady: true})
	obj, err := p.Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	checkReady(t, obj, false, start)
	if cs := obj.Spec.Containers[0].Ports; len(cs) != 1 || cs[0].Name != "" || cs[0].ContainerPort != 80 {
		t.Errorf("container ports %+v, want 80 without a name", cs)
	}
}

// TestPodServer checks that a pod's server answers its node, the other node and a pod
// on the other node, on both families, and reports the address each came from.
func TestPodServer(t *testing.T) {
	t.Parallel()
	admin, ns, n := setup(t, 2)
	node1, node2 := n.Nodes[0], n.Nodes[1]
	web := pods.ForTest(t, admin, n, node1, pods.Spec{Namespace: ns, Name: "web-0", Labels: map[string]string{"app": "web"}, Port: 8080})
	other := pods.ForTest(t, admin, n, node2, pods.Spec{Namespace: ns, Name: "other-0", Port: 8080})

	for _, tt := range []struct {
		from *netns.Host
		srcs []netip.Addr // what web-0 sees, IPv4 then IPv6
	}{
		{node1, []netip.Addr{node1.PodSubnet4.Addr().Next(), node1.PodSubnet6.Addr().Next()}}, // its node, from the bridge
		{node2, []netip.Addr{node2.IPv4, node2.IPv6}},                                         // the other node, from eth0
		{other.Host, other.IPs()},                                                             // a pod, from itself
	} {
		for i, dst := range web.IPs() {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			got, err := traffic.Ask(ctx, tt.from.Dial, netip.AddrPortFrom(dst, uint16(web.Port)))
			cancel()
			want := traffic.Answer{Pod: "web-0", Node: "node1", Client: tt.srcs[i]}
			if err != nil || got != want {
				t.Errorf("%s → web-0 at %s: %+v, %v; want %+v", tt.from.Label, dst, got, err, want)
			}
		}
	}

	// An open-loop client records the node, the pod and the address it saw.
	c := traffic.Start(other.Host.Dial, netip.AddrPortFrom(web.Host.IPv6, uint16(web.Port)), 10*time.Millisecond, time.Second)
	defer c.Stop()
	for deadline := time.Now().Add(10 * time.Second); len(c.Requests()) < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests finished in 10 s at one per 10 ms", len(c.Requests()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range c.Stop() {
		if !r.OK() || r.Node != "node1" || r.Pod != "web-0" || r.ClientAddr != other.Host.IPv6 {
			t.Errorf("request %+v, want answered by web-0 on node1, which saw %s", r, other.Host.IPv6)
		}
	}

	// Delete stops the server.
	if err := web.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if a, err := traffic.Ask(ctx, node1.Dial, netip.AddrPortFrom(web.Host.IPv4, uint16(web.Port))); err == nil {
		t.Errorf("web-0 answered after Delete: %+v", a)
	}
}

// TestCreateErrors checks what Create refuses, and that a failed Create leaves nothing
// of the pod behind and nothing of what was there before touched.
func TestCreateErrors(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	node1 := n.Nodes[0]
	existing := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "taken"}}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node1.Label}}, existing)
	for _, tt := range []struct {
		what string
		node *netns.Host
		spec pods.Spec
	}{
		{"no name", node1, pods.Spec{Namespace: "default", Port: 80}},
		{"no namespace", node1, pods.Spec{Name: "x", Port: 80}},
		{"no port", node1, pods.Spec{Namespace: "default", Name: "x"}},
		{"a port too high", node1, pods.Spec{Namespace: "default", Name: "x", Port: 65536}},
		{"no node", nil, pods.Spec{Namespace: "default", Name: "x", Port: 80}},
		{"no Node object", n.Client, pods.Spec{Namespace: "default", Name: "x", Port: 80}},
		{"a Pod of that name", node1, pods.Spec{Namespace: "default", Name: "taken", Port: 80}},
	} {
		if p, err := pods.Create(t.Context(), client, n, tt.node, tt.spec); err == nil {
			t.Errorf("Create with %s succeeded: %s", tt.what, p.Host.Name)
		} else {
			t.Logf("with %s: %v", tt.what, err)
		}
	}
	if got := n.Pods(); len(got) != 0 {
		t.Errorf("pods left after failed Creates: %v", got)
	}
	if _, err := client.CoreV1().Pods("default").Get(t.Context(), "taken", metav1.GetOptions{}); err != nil {
		t.Errorf("the Pod that was there before: %v", err)
	}
}
