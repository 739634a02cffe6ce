// Package conditions tells each Service the ccm serves how its load balancer is, in the
// Service's own status: the conditions KEP-4631 proposes, LoadBalancerProvisioning,
// LoadBalancerServing and LoadBalancerDegraded, made from the addresses the Service holds
// and the announcer's decision for them. Want and Next decide, purely; the Controller
// writes what they decide, only when it differs from what the Service carries.
package conditions

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// The condition types, as KEP-4631 names them.
const (
	// TypeProvisioning is True while the Service waits for an address, False once it
	// holds one.
	TypeProvisioning = "LoadBalancerProvisioning"
	// TypeServing is True while a node announces the Service's addresses, False while none
	// does.
	TypeServing = "LoadBalancerServing"
	// TypeDegraded is True, with the reason, while some or all of the Service's addresses
	// may be unanswered; absent otherwise, as KEP-4631 has it.
	TypeDegraded = "LoadBalancerDegraded"
)

// Types are the condition types the ccm writes. A Service's conditions of any other type
// are left as they are.
var Types = []string{TypeProvisioning, TypeServing, TypeDegraded}

// The reasons of the conditions. Provisioning and Serving take KEP-4631's well-known
// reasons while things go well, the reason of the degradation when they do not.
const (
	// ReasonProvisioning: the Service holds no address yet (LoadBalancerProvisioning True,
	// LoadBalancerServing False).
	ReasonProvisioning = "Provisioning"
	// ReasonComplete: the Service holds its addresses (LoadBalancerProvisioning False).
	ReasonComplete = "Complete"
	// ReasonServing: a node announces the addresses (LoadBalancerServing True).
	ReasonServing = "Serving"

	// ReasonNoEligibleNode: no node may announce: every node is down, draining,
	// starting, being deleted, excluded, or outside a pool's nodeSelector.
	ReasonNoEligibleNode = string(pick.ReasonNoEligibleNode)
	// ReasonNoLocalEndpoints: externalTrafficPolicy is Local and no eligible node has a
	// ready endpoint of the Service.
	ReasonNoLocalEndpoints = string(pick.ReasonNoLocalEndpoints)
	// ReasonNoInterface: the nodes that would be eligible have no up interface for the
	// addresses' pool, or no address of their family on it.
	ReasonNoInterface = "NoInterface"
	// ReasonPartlyAnnounced: a node announces some of the addresses; no node can announce
	// the others (a family, or a pool's), for want of an interface.
	ReasonPartlyAnnounced = announcer.ReasonPartlyAnnounced
	// ReasonCCMIsolated: the ccm lost the probes of most agents at once, the announcing
	// node's among them, and takes itself for cut off: it keeps the announcer, but cannot
	// tell whether it still announces.
	ReasonCCMIsolated = "CCMIsolated"
	// ReasonMultiple: LoadBalancerDegraded for more than one reason, each in the message.
	ReasonMultiple = "Multiple"
)

// Want returns the conditions of the types in Types that a Service should carry: r is its
// request (annotation.Parse's), a the announcer's Announcement for it, nil before the
// announcer decided. ok is false when they say nothing yet, and the Service's conditions
// are to be left as they are: a Service being deleted, or one holding addresses the
// announcer has not decided since this ccm started leading (it would otherwise be told
// Provisioning, and Serving again a moment later, at every restart). A Service that is
// not the ccm's should carry none.
func Want(r *annotation.Request, a *announcer.Announcement, generation int64) (want []metav1.Condition, ok bool) {
	switch {
	case !r.Ours():
		return nil, true
	case r.Deleting:
		return nil, false
	case len(r.Ingress) == 0:
		return []metav1.Condition{
			condition(TypeProvisioning, metav1.ConditionTrue, ReasonProvisioning, "Waiting for an address from the pools of the cloud-config; the Service's events say why if one was refused", generation),
			condition(TypeServing, metav1.ConditionFalse, ReasonProvisioning, "The Service holds no address yet", generation),
		}, true
	case a == nil:
		return nil, false
	}
	addrs := list(r.Ingress)
	want = append(want, condition(TypeProvisioning, metav1.ConditionFalse, ReasonComplete, "The Service holds "+addrs, generation))
	var degraded []metav1.Condition
	if a.Node == "" {
		reason := ReasonNoEligibleNode
		switch {
		case a.Reason == pick.ReasonNoLocalEndpoints:
			reason = ReasonNoLocalEndpoints
		case a.OnlyUnable:
			reason = ReasonNoInterface
		}
		want = append(want, condition(TypeServing, metav1.ConditionFalse, reason, "No node announces "+addrs, generation))
		degraded = append(degraded, condition(TypeDegraded, metav1.ConditionTrue, reason, "No node announces "+addrs+": "+a.Told, generation))
	} else {
		want = append(want, condition(TypeServing, metav1.ConditionTrue, ReasonServing, a.Node+" announces "+addrs, generation))
		if a.Unannounced != "" {
			degraded = append(degraded, condition(TypeDegraded, metav1.ConditionTrue, ReasonPartlyAnnounced,
				"No node can announce "+a.Unannounced+"; "+a.Node+" announces the rest", generation))
		}
		if a.Isolated {
			degraded = append(degraded, condition(TypeDegraded, metav1.ConditionTrue, ReasonCCMIsolated,
				"The ccm lost the probes of most agents at once, "+a.Node+"'s among them: it takes itself for cut off and keeps "+a.Node+" as the announcer, but cannot tell whether it still announces", generation))
		}
	}
	switch len(degraded) {
	case 0:
	case 1:
		want = append(want, degraded[0])
	default:
		var why []string
		for _, d := range degraded {
			why = append(why, d.Reason+": "+d.Message)
		}
		want = append(want, condition(TypeDegraded, metav1.ConditionTrue, ReasonMultiple, strings.Join(why, "; "), generation))
	}
	return want, true
}

// Next returns the conditions of the types in Types that a Service carrying have should
// carry to say want, in want's order, and whether they differ from have's. It follows
// meta.SetStatusCondition: a condition's lastTransitionTime is now when it is new or its
// status changes, and kept otherwise, so that a reason or message that changes alone does
// not look like a transition.
func Next(have, want []metav1.Condition, now time.Time) (next []metav1.Condition, changed bool) {
	var merged []metav1.Condition
	for _, c := range have {
		if slices.Contains(Types, c.Type) && meta.FindStatusCondition(merged, c.Type) == nil {
			merged = append(merged, *c.DeepCopy())
		}
	}
	for _, w := range want {
		w.LastTransitionTime = metav1.NewTime(now)
		if meta.SetStatusCondition(&merged, w) {
			changed = true
		}
	}
	for _, t := range Types {
		if meta.FindStatusCondition(want, t) == nil && meta.RemoveStatusCondition(&merged, t) {
			changed = true
		}
	}
	for _, w := range want {
		next = append(next, *meta.FindStatusCondition(merged, w.Type))
	}
	return next, changed
}

// Equal reports whether a and b hold the same conditions, in any order, lastTransitionTime
// apart.
func Equal(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		y := meta.FindStatusCondition(b, x.Type)
		if y == nil || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

func condition(typ string, status metav1.ConditionStatus, reason, message string, generation int64) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
}

// list says addrs for people: "198.51.100.1, 2001:db8::1".
func list(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
