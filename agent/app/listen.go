package app

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/liveness"
)

// metricsPort is the port of --metrics-address when the flag is not set.
const metricsPort = 7475

// listenAddresses returns where the agent listens: the flags when set, else the address
// the ccm and the peers reach the agent at, liveness.AgentAddr of its Node (its first
// InternalIP), at the agents' port of the cloud-config for the probes and at metricsPort
// for /metrics and the kubelet's probes. That address is where both probe the agent, so
// a socket on every interface would only answer where nobody of ours sends: on a node's
// public or storage network, to anyone there. The kubelet's probes and Prometheus reach
// the agent at its pod's IP, which for a pod on the host network is the kubelet's host IP:
// also the Node's first InternalIP, whenever the Node has one. at is the address chosen,
// invalid when both flags were set and node was not needed; node may be nil then.
func listenAddresses(probeFlag, metricsFlag string, node *v1.Node, agentPort int) (probeAddr, metricsAddr string, at netip.Addr, err error) {
	if probeFlag != "" && metricsFlag != "" {
		return probeFlag, metricsFlag, netip.Addr{}, nil
	}
	if node == nil {
		return "", "", netip.Addr{}, fmt.Errorf("no Node to take the listening address from")
	}
	at, ok := liveness.AgentAddr(node)
	if !ok {
		return "", "", netip.Addr{}, fmt.Errorf("node %q has no InternalIP in status.addresses (it has %v): the ccm and the peers probe the agent at the first one, and the agent listens only there; give the Node one, or set --probe-address and --metrics-address", node.Name, node.Status.Addresses)
	}
	probeAddr, metricsAddr = probeFlag, metricsFlag
	if probeAddr == "" {
		probeAddr = netip.AddrPortFrom(at, uint16(agentPort)).String()
	}
	if metricsAddr == "" {
		metricsAddr = netip.AddrPortFrom(at, metricsPort).String()
	}
	return probeAddr, metricsAddr, at, nil
}

// getNode reads the agent's Node. A Node that does not exist is an error at once: a
// wrong --node-name would otherwise leave the agent silently announcing nothing. Any
// other error is retried, with a backoff up to 10 s, until ctx ends: the listening
// address is in the Node, and an agent that starts while the API server is away could
// not fill its Service cache anyway, so it announces nothing either way.
func getNode(ctx context.Context, client kubernetes.Interface, name string) (*v1.Node, error) {
	delay := 500 * time.Millisecond
	for {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := client.CoreV1().Nodes().Get(reqCtx, name, metav1.GetOptions{})
		cancel()
		switch {
		case err == nil:
			return n, nil
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("--node-name %q: no such Node", name)
		}
		klog.ErrorS(err, "Cannot read the Node, which says where to listen; retrying", "node", name, "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node %q: %w (last error: %v)", name, context.Cause(ctx), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// checkNode fails when the node does not exist: a wrong --node-name would otherwise leave
// the agent silently announcing nothing. Any other error is only logged, so that an agent
// told where to listen can start while the API server is away.
func checkNode(ctx context.Context, client kubernetes.Interface, node string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("--node-name %q: no such Node", node)
	case err != nil:
		klog.ErrorS(err, "Cannot check the Node; going on", "node", node)
	}
	return nil
}

// addressMoved reports, once, on the returned channel an error when the agent's Node no
// longer has at as its first InternalIP: the ccm and the peers then probe the new address,
// where nothing listens. Rebinding in place would leave a moment with no responder; the
// agent exits instead, and the kubelet starts it again at the new address at once, while
// the ccm has taken the node for down and its standbys announce.
func addressMoved(nodes cache.SharedIndexInformer, name string, at netip.Addr) (<-chan error, error) {
	moved := make(chan error, 1)
	check := func(obj any) {
		n, ok := obj.(*v1.Node)
		if !ok || n.Name != name {
			return
		}
		now, ok := liveness.AgentAddr(n)
		if ok && now == at {
			return
		}
		var err error
		if ok {
			err = fmt.Errorf("node %q: the first InternalIP in status.addresses is now %s, no longer %s where the agent listens: exiting, to be restarted there", name, now, at)
		} else {
			err = fmt.Errorf("node %q: status.addresses has no InternalIP any more (it has %v), none where the agent listens, %s: exiting", name, n.Status.Addresses, at)
		}
		select {
		case moved <- err:
		default:
		}
	}
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
	})
	return moved, err
}
