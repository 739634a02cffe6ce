package servicewatch

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// Transform keeps of a Service only what the agent reads: what annotation.Parse reads,
// and the identity an event on the Service needs. Every agent caches every LoadBalancer
// Service of the cluster, most of them not its own, so the rest
// (managedFields, the last-applied-configuration annotation, selectors, cluster IPs) would
// be most of its memory. It is a cache.TransformFunc, for the informer of the Services;
// any other object is returned as it is. Transforming a transformed Service changes
// nothing.
func Transform(obj any) (any, error) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return obj, nil
	}
	out := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			Labels:            svc.Labels,
			DeletionTimestamp: svc.DeletionTimestamp,
			Annotations:       ownAnnotations(svc.Annotations),
		},
		Spec: v1.ServiceSpec{
			Type:                  svc.Spec.Type,
			LoadBalancerClass:     svc.Spec.LoadBalancerClass,
			ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
			IPFamilies:            svc.Spec.IPFamilies,
			IPFamilyPolicy:        svc.Spec.IPFamilyPolicy,
			LoadBalancerIP:        svc.Spec.LoadBalancerIP,
		},
	}
	if len(svc.Spec.Ports) > 0 {
		out.Spec.Ports = make([]v1.ServicePort, len(svc.Spec.Ports))
		for i, p := range svc.Spec.Ports {
			out.Spec.Ports[i] = v1.ServicePort{Protocol: p.Protocol, Port: p.Port}
		}
	}
	if len(svc.Status.LoadBalancer.Ingress) > 0 {
		out.Status.LoadBalancer.Ingress = make([]v1.LoadBalancerIngress, len(svc.Status.LoadBalancer.Ingress))
		for i, ing := range svc.Status.LoadBalancer.Ingress {
			out.Status.LoadBalancer.Ingress[i] = v1.LoadBalancerIngress{IP: ing.IP, Hostname: ing.Hostname}
		}
	}
	return out, nil
}

// ownAnnotations returns the annotations of this project: annotation.Parse reads no
// other, and the biggest annotation of most Services, kubectl's
// last-applied-configuration, is a copy of the whole object.
func ownAnnotations(all map[string]string) map[string]string {
	var out map[string]string
	for k, v := range all {
		if strings.HasPrefix(k, annotation.Prefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
