package integration

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

var vip = corev1.LoadBalancerIPModeVIP

func TestLoadBalancerServiceStatus(t *testing.T) {
	requireDualStack := corev1.IPFamilyPolicyRequireDualStack
	tests := []struct {
		name         string
		policy       *corev1.IPFamilyPolicy
		wantFamilies []corev1.IPFamily
		ingress      []corev1.LoadBalancerIngress
	}{{
		name:         "IPv4",
		wantFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		ingress:      []corev1.LoadBalancerIngress{{IP: "203.0.113.10", IPMode: &vip}},
	}, {
		name:         "dual-stack",
		policy:       &requireDualStack,
		wantFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		ingress: []corev1.LoadBalancerIngress{
			{IP: "203.0.113.11", IPMode: &vip},
			{IP: "2001:db8::11", IPMode: &vip},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, admin, ns := setup(t)
			svc := createLoadBalancer(t, admin, ns, tt.policy)

			if !reflect.DeepEqual(svc.Spec.IPFamilies, tt.wantFamilies) {
				t.Errorf("ipFamilies = %v, want %v", svc.Spec.IPFamilies, tt.wantFamilies)
			}
			if len(svc.Spec.ClusterIPs) != len(tt.wantFamilies) {
				t.Fatalf("clusterIPs = %v, want one for each of %v", svc.Spec.ClusterIPs, tt.wantFamilies)
			}
			for i, family := range tt.wantFamilies {
				ip, err := netip.ParseAddr(svc.Spec.ClusterIPs[i])
				if err != nil || ip.Is4() != (family == corev1.IPv4Protocol) {
					t.Errorf("clusterIPs[%d] = %q, want an %s address", i, svc.Spec.ClusterIPs[i], family)
				}
			}

			patchIngress(t, admin, svc, tt.ingress)
			got, err := admin.CoreV1().Services(ns).Get(t.Context(), svc.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Status.LoadBalancer.Ingress, tt.ingress) {
				t.Errorf("status.loadBalancer.ingress = %+v, want %+v", got.Status.LoadBalancer.Ingress, tt.ingress)
			}
		})
	}
}

func TestWatchSeesServiceStatus(t *testing.T) {
	_, admin, ns := setup(t)
	svc := createLoadBalancer(t, admin, ns, nil)

	// Watching from the creation's resourceVersion, so the status change cannot slip
	// in before the watch starts.
	w, err := admin.CoreV1().Services(ns).Watch(t.Context(), metav1.ListOptions{
		ResourceVersion: svc.ResourceVersion,
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", svc.Name).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ingress := []corev1.LoadBalancerIngress{{IP: "203.0.113.20", IPMode: &vip}}
	patchIngress(t, admin, svc, ingress)

	timeout := time.After(30 * time.Second)
	for {
		select {
		case event, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the status change arrived")
			}
			got, isService := event.Object.(*corev1.Service)
			if event.Type == watch.Modified && isService && reflect.DeepEqual(got.Status.LoadBalancer.Ingress, ingress) {
				return
			}
			if event.Type == watch.Error {
				t.Fatalf("watch error: %v", event.Object)
			}
		case <-timeout:
			t.Fatal("no MODIFIED event with the new status within 30s")
		}
	}
}

func createLoadBalancer(t *testing.T, client kubernetes.Interface, ns string, policy *corev1.IPFamilyPolicy) *corev1.Service {
	t.Helper()
	svc, err := client.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "lb-"},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeLoadBalancer,
			IPFamilyPolicy: policy,
			Selector:       map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{
				Name:       "http",
				Protocol:   corev1.ProtocolTCP,
				Port:       80,
				TargetPort: intstr.FromInt32(8080),
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create LoadBalancer Service: %v", err)
	}
	return svc
}

// patchIngress sets the Service's load-balancer ingress through the status subresource,
// as the cloud-controller-manager does.
func patchIngress(t *testing.T, client kubernetes.Interface, svc *corev1.Service, ingress []corev1.LoadBalancerIngress) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{
		"status": corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Services(svc.Namespace).Patch(t.Context(), svc.Name,
		types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch status of Service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
}
