package provider

import (
	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// HealthSource says whether a node's agent can announce. The owner controller reads it for
// every decision; OnChange lets the source tell the controller which node changed.
type HealthSource interface {
	Healthy(node string) bool
	OnChange(func(node string))
}

// nodeConditionHealth stands in for the agent prober: a node is healthy while its Node
// object does not say Ready=False. Node changes reach the owner controller through its
// node informer, so it has no changes of its own to report.
type nodeConditionHealth struct {
	nodes corelisters.NodeLister
}

func (h nodeConditionHealth) Healthy(name string) bool {
	node, err := h.nodes.Get(name)
	if err != nil {
		return false
	}
	return nodeReady(node) != v1.ConditionFalse
}

func (h nodeConditionHealth) OnChange(func(node string)) {}

// nodeReady returns the status of the node's Ready condition, or Unknown without one.
func nodeReady(node *v1.Node) v1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return v1.ConditionUnknown
}
