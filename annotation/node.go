package annotation

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Maintenance is what a Node says of planned maintenance, as ReadNode reads it. The ccm
// decides from it who may announce, and the Node's own agent whether to keep answering
// for a moment for the addresses that leave it: both must read a Node the same way.
type Maintenance struct {
	// Drained says, for people, why the Node is drained, completing "node-a is drained
	// ...": "by the annotation lb.baremetal.io/drain"; "" when it is not drained.
	Drained string
	// OutOfService says the Node has the taint node.kubernetes.io/out-of-service, with any
	// effect: an operator says the node is down, so the ccm takes it for down at once,
	// whatever its agent answers.
	OutOfService bool
}

// The reasons Maintenance.Drained gives.
const (
	drainedByAnnotation = "by the annotation " + Drain
	drainedByCordon     = "as it is cordoned (spec.unschedulable) and maintenance.drainOnCordon is on"
)

// ReadNode returns what n says of planned maintenance. drainOnCordon is the cloud-config's
// maintenance.drainOnCordon: with it, a cordoned Node is drained too, unless its Drain
// annotation says "false", so that an operator can cordon one node without moving its
// addresses.
//
// A Drain value other than "true" or "false" is refused with a *FieldError naming the
// key and the value, and counts as absent: a typo must never move addresses.
func ReadNode(n *v1.Node, drainOnCordon bool) (Maintenance, error) {
	m := Maintenance{OutOfService: slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == v1.TaintNodeOutOfService
	})}
	var err error
	if _, ok := n.Annotations[Drain]; ok {
		var value string
		if value, err = readFrom(n.Annotations, Drain); err == nil {
			switch value {
			case "true":
				m.Drained = drainedByAnnotation
				return m, nil
			case "false":
				return m, nil
			default:
				err = &FieldError{Field: Drain, Value: value, Reason: `want "true" or "false"; the node is not drained by it`}
			}
		}
	}
	if drainOnCordon && n.Spec.Unschedulable {
		m.Drained = drainedByCordon
	}
	return m, err
}
