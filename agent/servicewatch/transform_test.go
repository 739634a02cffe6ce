package servicewatch

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// bigMeta is what the API server and kubectl add to every Service: none of it is read.
func bigMeta(name string) metav1.ObjectMeta {
	now := metav1.Now()
	return metav1.ObjectMeta{
		Name: name, Namespace: "shop", UID: "uid-" + types.UID(name), ResourceVersion: "4711", Generation: 3,
		CreationTimestamp: now,
		Labels:            map[string]string{"app": name, "tier": "front"},
		Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `"}}`,
			"prometheus.io/scrape":                             "true",
		},
		Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: "owner"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, Time: &now}},
	}
}

func withAnnotations(m metav1.ObjectMeta, kv ...string) metav1.ObjectMeta {
	m.Annotations = maps.Clone(m.Annotations)
	for i := 0; i < len(kv); i += 2 {
		m.Annotations[kv[i]] = kv[i+1]
	}
	return m
}

func ports() []v1.ServicePort {
	return []v1.ServicePort{
		{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 31080},
		{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 31053},
	}
}

// representative returns Services of every kind the agent meets.
func representative() []*v1.Service {
	deleting := metav1.Now()
	lb := &v1.Service{
		ObjectMeta: withAnnotations(bigMeta("web"),
			annotation.Announcer, "node-a", annotation.Standbys, "node-b, node-c",
			annotation.Pool, "public", annotation.IPs, "192.0.2.10",
			annotation.AllowSharedIP, "web", annotation.SharedIPNamespaces, "team-b",
			annotation.PreferredNodes, "node-c,node-a"),
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, Ports: ports(), Selector: map[string]string{"app": "web"},
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicySingleStack), ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort: 32000, SessionAffinity: v1.ServiceAffinityNone, AllocateLoadBalancerNodePorts: ptr.To(true),
		},
		Status: v1.ServiceStatus{
			LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: "192.0.2.10", IPMode: ptr.To(v1.LoadBalancerIPModeVIP), Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}},
				{Hostname: "web.example.com"},
				{IP: "not-an-ip"},
			}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ok", LastTransitionTime: deleting}},
		},
	}
	dual := lb.DeepCopy()
	dual.Name = "dual"
	dual.Annotations = maps.Clone(bigMeta("dual").Annotations)
	dual.Annotations[annotation.Announcer] = "node-b"
	dual.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	dual.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
	dual.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	dual.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "2001:db8::10"}, {IP: "192.0.2.11"}}

	requested := lb.DeepCopy()
	requested.Name = "requested"
	requested.Annotations = withAnnotations(bigMeta("requested"), annotation.Announcer, "node-a").Annotations
	requested.Spec.LoadBalancerIP = "192.0.2.12"

	bad := lb.DeepCopy()
	bad.Name = "bad"
	bad.Annotations[annotation.IPs] = "2001:db8::1,nonsense"
	bad.Annotations[annotation.Standbys] = "Not_A_Name"
	bad.Spec.IPFamilies = []v1.IPFamily{"IPv5"}

	gone := lb.DeepCopy()
	gone.Name = "gone"
	gone.DeletionTimestamp = &deleting

	class := lb.DeepCopy()
	class.Name = "other-class"
	class.Spec.LoadBalancerClass = ptr.To("example.com/other")

	return []*v1.Service{
		lb, dual, requested, bad, gone, class,
		{
			ObjectMeta: withAnnotations(bigMeta("cluster-ip"), annotation.Announcer, "node-a"),
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, Ports: ports(), ClusterIP: "10.96.0.11",
				ClusterIPs: []string{"10.96.0.11", "fd00::11"}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
				IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack), Selector: map[string]string{"app": "x"}},
		},
		{ObjectMeta: bigMeta("plain"), Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, Ports: ports(), ClusterIP: "None"}},
		{ObjectMeta: bigMeta("external"), Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "db.example.com"}},
		{ObjectMeta: bigMeta("node-port"), Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, Ports: ports()}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "shop"}},
	}
}

// TestTransformKeepsTheRequest: the agent decides from annotation.Parse's Request, which
// must read the same from the transformed Service as from the original.
func TestTransformKeepsTheRequest(t *testing.T) {
	for _, svc := range representative() {
		t.Run(svc.Name, func(t *testing.T) {
			orig := svc.DeepCopy()
			obj, err := Transform(svc)
			if err != nil {
				t.Fatal(err)
			}
			small := obj.(*v1.Service)
			if !reflect.DeepEqual(svc, orig) {
				t.Error("Transform changed the object it was given")
			}
			want, wantErr := annotation.Parse(orig)
			got, gotErr := annotation.Parse(small)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse of the transformed Service:\n%+v\nof the original:\n%+v", got, want)
			}
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Errorf("Parse error of the transformed Service %v, of the original %v", gotErr, wantErr)
			}
			// What an event on the Service refers to.
			if small.Name != svc.Name || small.Namespace != svc.Namespace || small.UID != svc.UID || small.ResourceVersion != svc.ResourceVersion {
				t.Errorf("identity lost: %+v", small.ObjectMeta)
			}
			if small.ManagedFields != nil || small.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" || small.Spec.Selector != nil || small.Status.Conditions != nil {
				t.Errorf("kept what nothing reads: %+v", small)
			}
			again, _ := Transform(small)
			if !reflect.DeepEqual(again, small) {
				t.Errorf("transforming again changed the Service:\n%+v\n%+v", again, small)
			}
		})
	}
}

func TestTransformLeavesOtherObjects(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	if got, err := Transform(n); err != nil || got != any(n) {
		t.Errorf("Transform(node) = %v, %v; want the node itself", got, err)
	}
}
