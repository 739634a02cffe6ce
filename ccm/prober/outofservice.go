package prober

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// syncOutOfService follows the taint node.kubernetes.io/out-of-service of n. A node with
// it is down at once, without waiting for its probes to fail: it is in the verdict, so
// that its standbys take its addresses over on the probe channel before any annotation is
// written, and its agent, which may well answer still, stands down. The taint is the
// operator's word, so it holds also while the isolation guard keeps every agent's state:
// the guard doubts the ccm's probes, not the operator.
//
// When the taint goes, the node is up again as its probes say; the announcer keeps it out
// of the plans it left until its agent has seen them (SetReplaced), as for any node back
// from down.
func (p *Prober) syncOutOfService(n *v1.Node) {
	m, _ := annotation.ReadNode(n, false) // only the taint is read here
	p.mu.Lock()
	if p.outOfService[n.Name] == m.OutOfService {
		p.mu.Unlock()
		return
	}
	was := p.healthLocked(n.Name)
	if m.OutOfService {
		p.outOfService[n.Name] = true
	} else {
		delete(p.outOfService, n.Name)
	}
	p.decideLocked()
	now := p.healthLocked(n.Name)
	listeners := p.listeners
	p.mu.Unlock()
	if m.OutOfService {
		klog.InfoS("Node has the out-of-service taint: taken for down at once", "node", n.Name, "taint", v1.TaintNodeOutOfService)
	} else {
		klog.InfoS("Node no longer has the out-of-service taint: its probes decide again", "node", n.Name, "state", now)
	}
	if was != now {
		p.notify(listeners, []string{n.Name})
	}
}
