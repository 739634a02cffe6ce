package integration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeAndEndpointSlice(t *testing.T) {
	_, admin, ns := setup(t)
	ctx := t.Context()

	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "worker-"},
		Spec:       corev1.NodeSpec{ProviderID: "baremetal://rack1/worker"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Node: %v", err)
	}
	t.Cleanup(func() {
		// Nodes are cluster-wide, unlike everything else a test makes in its namespace.
		_ = admin.CoreV1().Nodes().Delete(t.Context(), node.Name, metav1.DeleteOptions{})
	})
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "198.51.100.7"},
		{Type: corev1.NodeInternalIP, Address: "2001:db8:1::7"},
	}
	if node, err = admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Node status: %v", err)
	}
	if len(node.Status.Addresses) != 2 {
		t.Errorf("node addresses = %v, want the two set", node.Status.Addresses)
	}

	ready := true
	port := int32(8080)
	tcp := corev1.ProtocolTCP
	_, err = admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-",
			Labels:       map[string]string{discoveryv1.LabelServiceName: "web"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node.Name,
		}},
		Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &tcp}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create EndpointSlice: %v", err)
	}

	slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=web",
	})
	if err != nil {
		t.Fatalf("list EndpointSlices of Service web: %v", err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 {
		t.Fatalf("got %d EndpointSlices for Service web, want 1 with 1 endpoint: %+v", len(slices.Items), slices.Items)
	}
	endpoint := slices.Items[0].Endpoints[0]
	if endpoint.NodeName == nil || *endpoint.NodeName != node.Name {
		t.Errorf("endpoint nodeName = %v, want %q", endpoint.NodeName, node.Name)
	}
	if endpoint.Conditions.Ready == nil || !*endpoint.Conditions.Ready {
		t.Errorf("endpoint ready = %v, want true", endpoint.Conditions.Ready)
	}
}
