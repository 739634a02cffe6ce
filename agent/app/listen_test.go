package app

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func nodeWith(addrs ...v1.NodeAddress) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1.NodeStatus{Addresses: addrs}}
}

// TestListenAddresses: by default both sockets are on the Node's first InternalIP that
// parses, the address the ccm and the peers probe; a flag that is set wins.
func TestListenAddresses(t *testing.T) {
	internal := func(a string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeInternalIP, Address: a} }
	dual := nodeWith(
		v1.NodeAddress{Type: v1.NodeHostName, Address: "node-a"},
		v1.NodeAddress{Type: v1.NodeExternalIP, Address: "203.0.113.7"},
		internal("not-an-ip"),
		internal("192.0.2.10"),
		internal("2001:db8::10"),
	)
	for _, tc := range []struct {
		name                   string
		probeFlag, metrics     string
		node                   *v1.Node
		wantProbe, wantMetrics string
	}{
		{name: "first InternalIP that parses", node: dual, wantProbe: "192.0.2.10:7474", wantMetrics: "192.0.2.10:7475"},
		{name: "IPv6 first", node: nodeWith(internal("2001:db8::10"), internal("192.0.2.10")), wantProbe: "[2001:db8::10]:7474", wantMetrics: "[2001:db8::10]:7475"},
		{name: "IPv4-mapped is IPv4, as the ccm probes it", node: nodeWith(internal("::ffff:192.0.2.10")), wantProbe: "192.0.2.10:7474", wantMetrics: "192.0.2.10:7475"},
		{name: "probe flag wins", probeFlag: ":7474", node: dual, wantProbe: ":7474", wantMetrics: "192.0.2.10:7475"},
		{name: "metrics flag wins", metrics: "127.0.0.1:9000", node: dual, wantProbe: "192.0.2.10:7474", wantMetrics: "127.0.0.1:9000"},
		{name: "both flags need no Node", probeFlag: "127.0.0.1:7474", metrics: "127.0.0.1:7475", wantProbe: "127.0.0.1:7474", wantMetrics: "127.0.0.1:7475"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, m, at, err := listenAddresses(tc.probeFlag, tc.metrics, tc.node, 7474)
			if err != nil {
				t.Fatal(err)
			}
			if p != tc.wantProbe || m != tc.wantMetrics {
				t.Errorf("listen at %s and %s, want %s and %s", p, m, tc.wantProbe, tc.wantMetrics)
			}
			if (tc.probeFlag == "" || tc.metrics == "") != at.IsValid() {
				t.Errorf("address followed %v: wanted one only when a default is used", at)
			}
		})
	}

	// No InternalIP: the error names the node and the field, whatever else it has.
	_, _, _, err := listenAddresses("", "", nodeWith(v1.NodeAddress{Type: v1.NodeExternalIP, Address: "203.0.113.7"}), 7474)
	if err == nil {
		t.Fatal("a Node without InternalIP gave an address")
	}
	for _, want := range []string{`"node-a"`, "InternalIP", "status.addresses", "--probe-address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	// One flag set still needs the Node for the other.
	if _, _, _, err := listenAddresses(":7474", "", nodeWith(), 7474); err == nil {
		t.Error("--probe-address alone gave a metrics address without an InternalIP")
	}
}

// TestAddressMoved: the agent learns when its Node's first InternalIP is no longer the one
// it listens at, and not before.
func TestAddressMoved(t *testing.T) {
	node := nodeWith(v1.NodeAddress{Type: v1.NodeInternalIP, Address: "192.0.2.10"})
	other := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	client := fake.NewClientset(node, other)
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	_, _, at, err := listenAddresses("", "", node, 7474)
	if err != nil || at.String() != "192.0.2.10" {
		t.Fatalf("listen at %v (%v), want 192.0.2.10", at, err)
	}
	moved, err := addressMoved(nodes, "node-a", at)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	update := func(n *v1.Node) {
		t.Helper()
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Another node's change, and a change of this one that keeps the first InternalIP.
	other = other.DeepCopy()
	other.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.99"}}
	update(other)
	node = node.DeepCopy()
	node.Status.Addresses = append(node.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "2001:db8::10"})
	update(node)
	select {
	case err := <-moved:
		t.Fatalf("moved while the first InternalIP is the same: %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	node = node.DeepCopy()
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.11"}}
	update(node)
	select {
	case err := <-moved:
		for _, want := range []string{`"node-a"`, "192.0.2.11", "192.0.2.10", "InternalIP"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %s", err, want)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no word of the new InternalIP")
	}
}
