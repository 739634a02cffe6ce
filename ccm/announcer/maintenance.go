package announcer

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// ReasonInvalidNodeAnnotation is the Warning event on a Node whose lb.baremetal.io/drain
// annotation holds neither "true" nor "false": the node is not drained by it, and the event
// says so, rather than guess what was meant and move addresses by surprise.
const ReasonInvalidNodeAnnotation = "InvalidNodeAnnotation"

// maintenance returns what n says of planned maintenance under the cloud-config now.
func (c *Controller) maintenance(n *v1.Node) (annotation.Maintenance, error) {
	return annotation.ReadNode(n, c.cfg.Load().Maintenance.DrainOnCordon)
}

// nodeAdded decides every group again with a new Node, and warns of its drain annotation
// if it cannot be read.
func (c *Controller) nodeAdded(obj any) {
	if n, ok := obj.(*v1.Node); ok {
		m, err := c.maintenance(n)
		c.warnAnnotation(n, err)
		logMaintenance(n.Name, annotation.Maintenance{}, m)
	}
	c.enqueueAll()
}

// nodeUpdated decides every group again when a Node changed in a way that can change a
// decision: kubelets update their Node often, and most updates do not.
func (c *Controller) nodeUpdated(old, cur any) {
	o, ok1 := old.(*v1.Node)
	n, ok2 := cur.(*v1.Node)
	if !ok1 || !ok2 {
		c.enqueueAll()
		return
	}
	was, _ := c.maintenance(o)
	now, err := c.maintenance(n)
	if o.Annotations[annotation.Drain] != n.Annotations[annotation.Drain] {
		c.warnAnnotation(n, err)
	}
	logMaintenance(n.Name, was, now)
	if was != now || !labels.Equals(o.Labels, n.Labels) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
		c.enqueueAll()
	}
}

// warnAnnotation tells of a drain annotation that cannot be read, on the Node and in the
// log.
func (c *Controller) warnAnnotation(n *v1.Node, err error) {
	if err == nil {
		return
	}
	klog.InfoS("Ignoring a Node annotation that cannot be read", "node", n.Name, "err", err)
	c.recorder.Eventf(nodeRef(n.Name), v1.EventTypeWarning, ReasonInvalidNodeAnnotation,
		"%v; set it to true to move every address off the node, or remove it", err)
}

// logMaintenance logs what changed of a Node's planned maintenance.
func logMaintenance(node string, was, now annotation.Maintenance) {
	switch {
	case was.Drained == now.Drained:
	case now.Drained != "":
		klog.V(2).InfoS("Node drained: its addresses move to other nodes", "node", node, "why", now.Drained)
	default:
		klog.V(2).InfoS("Node no longer drained: it may announce again", "node", node)
	}
	switch {
	case was.OutOfService == now.OutOfService:
	case now.OutOfService:
		klog.V(2).InfoS("Node out of service: taken for down", "node", node)
	default:
		klog.V(2).InfoS("Node no longer out of service", "node", node)
	}
}

// nodeRef refers to a Node in an event as the kubelet does, so that kubectl describe node
// shows it.
func nodeRef(name string) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}
