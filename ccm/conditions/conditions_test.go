package conditions

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// lbService is a Service of type LoadBalancer holding ips in its status.
func lbService(name string, ips ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 3},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func request(t *testing.T, svc *v1.Service) *annotation.Request {
	t.Helper()
	r, _ := annotation.Parse(svc)
	return r
}

// says writes conditions as "Type=Status/Reason: message", one a line, in their order.
func says(conditions []metav1.Condition) string {
	var s []string
	for _, c := range conditions {
		s = append(s, fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(s, "\n")
}

func TestWant(t *testing.T) {
	other := lbService("other", "198.51.100.1")
	other.Spec.LoadBalancerClass = ptr.To("example.com/other")
	clusterIP := lbService("plain")
	clusterIP.Spec.Type = v1.ServiceTypeClusterIP
	deleting := lbService("going", "198.51.100.1")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	held := lbService("web", "198.51.100.1", "2001:db8::1")
	const (
		provisioning = "LoadBalancerProvisioning=False/Complete: The Service holds 198.51.100.1, 2001:db8::1\n"
		noAddress    = "LoadBalancerProvisioning=True/Provisioning: Waiting for an address from the pools of the cloud-config; the Service's events say why if one was refused\n" +
			"LoadBalancerServing=False/Provisioning: The Service holds no address yet"
	)
	for _, tc := range []struct {
		name string
		svc  *v1.Service
		a    *announcer.Announcement
		// want is what says gives, "-" for nothing to say (ok false).
		want string
	}{
		{"another class: none", other, nil, ""},
		{"not a load balancer: none", clusterIP, nil, ""},
		{"being deleted: left as it is", deleting, &announcer.Announcement{Node: "node-a"}, "-"},
		{"no address", lbService("new"), nil, noAddress},
		{"addresses, not decided yet: left as it is", held, nil, "-"},
		{"announced", held, &announcer.Announcement{Node: "node-a", Reason: pick.ReasonEndpoints},
			provisioning + "LoadBalancerServing=True/Serving: node-a announces 198.51.100.1, 2001:db8::1"},
		{"no node may announce", held, &announcer.Announcement{Reason: pick.ReasonNoEligibleNode, Told: "no node may announce: node-a agent not answering"},
			provisioning + "LoadBalancerServing=False/NoEligibleNode: No node announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/NoEligibleNode: No node announces 198.51.100.1, 2001:db8::1: no node may announce: node-a agent not answering"},
		{"no interface", held, &announcer.Announcement{Reason: pick.ReasonNoEligibleNode, OnlyUnable: true, Told: "no node may announce: node-a has no up interface for pool default"},
			provisioning + "LoadBalancerServing=False/NoInterface: No node announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/NoInterface: No node announces 198.51.100.1, 2001:db8::1: no node may announce: node-a has no up interface for pool default"},
		{"no local endpoint", held, &announcer.Announcement{Reason: pick.ReasonNoLocalEndpoints, Told: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of ns/web"},
			provisioning + "LoadBalancerServing=False/NoLocalEndpoints: No node announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/NoLocalEndpoints: No node announces 198.51.100.1, 2001:db8::1: externalTrafficPolicy is Local and no eligible node has a ready endpoint of ns/web"},
		{"partly announced", held, &announcer.Announcement{Node: "node-a", Unannounced: "the IPv6 addresses of pool default: node-a has no IPv6 address on eth0"},
			provisioning + "LoadBalancerServing=True/Serving: node-a announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/PartlyAnnounced: No node can announce the IPv6 addresses of pool default: node-a has no IPv6 address on eth0; node-a announces the rest"},
		{"isolated", held, &announcer.Announcement{Node: "node-a", Isolated: true},
			provisioning + "LoadBalancerServing=True/Serving: node-a announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/CCMIsolated: The ccm lost the probes of most agents at once, node-a's among them: it takes itself for cut off and keeps node-a as the announcer, but cannot tell whether it still announces"},
		{"isolated and partly announced", held, &announcer.Announcement{Node: "node-a", Isolated: true, Unannounced: "the IPv6 addresses of pool default: node-a has no IPv6 address on eth0"},
			provisioning + "LoadBalancerServing=True/Serving: node-a announces 198.51.100.1, 2001:db8::1\n" +
				"LoadBalancerDegraded=True/Multiple: PartlyAnnounced: No node can announce the IPv6 addresses of pool default: node-a has no IPv6 address on eth0; node-a announces the rest; " +
				"CCMIsolated: The ccm lost the probes of most agents at once, node-a's among them: it takes itself for cut off and keeps node-a as the announcer, but cannot tell whether it still announces"},
	} {
		want, ok := Want(request(t, tc.svc), tc.a, tc.svc.Generation)
		got := says(want)
		if !ok {
			got = "-"
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		for _, c := range want {
			if c.ObservedGeneration != tc.svc.Generation || !c.LastTransitionTime.IsZero() {
				t.Errorf("%s: %s has observedGeneration %d and lastTransitionTime %v, want %d and none: Next sets it", tc.name, c.Type, c.ObservedGeneration, c.LastTransitionTime, tc.svc.Generation)
			}
		}
	}
}

func TestNext(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	at := func(c metav1.Condition, t time.Time) metav1.Condition {
		c.LastTransitionTime = metav1.NewTime(t)
		return c
	}
	serving := condition(TypeServing, metav1.ConditionTrue, ReasonServing, "node-a announces 198.51.100.1", 3)
	complete := condition(TypeProvisioning, metav1.ConditionFalse, ReasonComplete, "The Service holds 198.51.100.1", 3)
	degraded := condition(TypeDegraded, metav1.ConditionTrue, ReasonCCMIsolated, "cut off", 3)
	foreign := at(metav1.Condition{Type: "example.com/Healthy", Status: metav1.ConditionTrue, Reason: "Fine"}, t0)

	moved := serving
	moved.Message = "node-b announces 198.51.100.1"
	stopped := condition(TypeServing, metav1.ConditionFalse, ReasonNoEligibleNode, "No node announces 198.51.100.1", 3)
	newer := serving
	newer.ObservedGeneration = 4
	edited := at(serving, t0)
	edited.Status = metav1.ConditionFalse
	for _, tc := range []struct {
		name        string
		have, want  []metav1.Condition
		wantNext    []metav1.Condition
		wantChanged bool
	}{
		{"nothing, nothing", nil, nil, nil, false},
		{"new", []metav1.Condition{foreign}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, now), at(serving, now)}, true},
		{"the same: steady state", []metav1.Condition{foreign, at(complete, t0), at(serving, t0)}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, t0), at(serving, t0)}, false},
		{"the same, in another order", []metav1.Condition{at(serving, t0), foreign, at(complete, t0)}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, t0), at(serving, t0)}, false},
		{"another message: no transition", []metav1.Condition{at(complete, t0), at(serving, t0)}, []metav1.Condition{complete, moved},
			[]metav1.Condition{at(complete, t0), at(moved, t0)}, true},
		{"another generation: no transition", []metav1.Condition{at(complete, t0), at(serving, t0)}, []metav1.Condition{complete, newer},
			[]metav1.Condition{at(complete, t0), at(newer, t0)}, true},
		{"another status: a transition", []metav1.Condition{at(complete, t0), at(serving, t0)}, []metav1.Condition{complete, stopped},
			[]metav1.Condition{at(complete, t0), at(stopped, now)}, true},
		{"degraded gone", []metav1.Condition{at(complete, t0), at(serving, t0), at(degraded, t0)}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, t0), at(serving, t0)}, true},
		{"edited by hand: put back", []metav1.Condition{at(complete, t0), edited}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, t0), at(serving, now)}, true},
		{"a duplicate: the first counts", []metav1.Condition{at(complete, t0), at(serving, t0), at(moved, t0)}, []metav1.Condition{complete, serving},
			[]metav1.Condition{at(complete, t0), at(serving, t0)}, false},
		{"not ours any more", []metav1.Condition{foreign, at(complete, t0), at(serving, t0)}, nil, nil, true},
		{"not ours, with another's condition only", []metav1.Condition{foreign}, nil, nil, false},
	} {
		have := make([]metav1.Condition, len(tc.have))
		for i := range tc.have {
			have[i] = *tc.have[i].DeepCopy()
		}
		next, changed := Next(have, tc.want, now)
		if changed != tc.wantChanged || !sameWithTimes(next, tc.wantNext) {
			t.Errorf("%s: Next = %v\n%s\nwant %v\n%s", tc.name, changed, dump(next), tc.wantChanged, dump(tc.wantNext))
		}
		for i := range have {
			if !sameWithTimes(have[i:i+1], tc.have[i:i+1]) {
				t.Errorf("%s: Next changed the conditions it was given", tc.name)
			}
		}
	}
}

func TestEqual(t *testing.T) {
	a := condition(TypeServing, metav1.ConditionTrue, ReasonServing, "node-a announces 198.51.100.1", 3)
	b := condition(TypeProvisioning, metav1.ConditionFalse, ReasonComplete, "The Service holds 198.51.100.1", 3)
	later := a
	later.LastTransitionTime = metav1.NewTime(time.Now())
	other := a
	other.Message = "node-b announces 198.51.100.1"
	for _, tc := range []struct {
		name string
		x, y []metav1.Condition
		want bool
	}{
		{"none", nil, nil, true},
		{"other order", []metav1.Condition{a, b}, []metav1.Condition{b, a}, true},
		{"lastTransitionTime apart", []metav1.Condition{a}, []metav1.Condition{later}, true},
		{"another message", []metav1.Condition{a}, []metav1.Condition{other}, false},
		{"one fewer", []metav1.Condition{a, b}, []metav1.Condition{a}, false},
	} {
		if got := Equal(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// sameWithTimes compares conditions in order, lastTransitionTime included.
func sameWithTimes(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !Equal(a[i:i+1], b[i:i+1]) || a[i].Type != b[i].Type || !a[i].LastTransitionTime.Equal(&b[i].LastTransitionTime) {
			return false
		}
	}
	return true
}

func dump(conditions []metav1.Condition) string {
	var s []string
	for _, c := range conditions {
		s = append(s, fmt.Sprintf("  %s=%s/%s gen %d at %s: %s", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message))
	}
	return strings.Join(s, "\n")
}
