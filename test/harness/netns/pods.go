package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// PodBridge is the bridge in every node's namespace whose ports are the node's pods'
// veths. It holds the gateway addresses of the node's pod range.
const PodBridge = "cbr0"

// Pod host numbers k within a node's range: 1 is the gateway, 255 the IPv4 broadcast.
const (
	podGateway = 1
	firstPod   = 2
	lastPod    = 254
)

// podRange returns the pod range of node number num.
func podRange(num byte) (v4, v6 netip.Prefix) {
	a4 := podSubnet4.Addr().As4()
	a4[2] = num
	a6 := podSubnet6.Addr().As16()
	// The fourth group of the address: fd00:198:19:<num>::.
	a6[7] = num
	return netip.PrefixFrom(netip.AddrFrom4(a4), 24), netip.PrefixFrom(netip.AddrFrom16(a6), 64)
}

// podAddrs returns the addresses and the MAC of host number k in node's pod range.
func podAddrs(node *Host, k byte) (v4, v6 netip.Addr, mac net.HardwareAddr) {
	a4 := node.PodSubnet4.Addr().As4()
	a4[3] = k
	a6 := node.PodSubnet6.Addr().As16()
	a6[15] = k
	return netip.AddrFrom4(a4), netip.AddrFrom16(a6), net.HardwareAddr{0x02, 0, 0x01, 0, node.num, k}
}

// buildPodNetwork gives node its PodBridge with the gateway addresses, and routes to the
// pod ranges of the other nodes of n through their eth0 addresses. Create runs it for
// every node, as a node's pod range and the routes to it are set up when the node joins
// a cluster: so no node's routes change as pods come and go, and a pod is one veth. It
// runs once eth0 is up, for the routes' gateways to be on a connected subnet. Without
// ports, cbr0 has no carrier: its routes are marked linkdown and no agent announces on
// it.
func (n *Network) buildPodNetwork(ctx context.Context, node *Host) error {
	gw4, gw6, mac := podAddrs(node, podGateway)
	// The bridge gets a MAC of its own: otherwise it takes the lowest of its ports',
	// which changes as pods come and go and leaves pods with a stale neighbour entry
	// for their gateway. mcast_snooping 0 as on br0: neighbour solicitations reach every
	// port whatever MLD reports the bridge has seen.
	lines := []string{
		fmt.Sprintf("link add %s address %s type bridge stp_state 0 mcast_snooping 0", PodBridge, mac),
		fmt.Sprintf("addr add %s dev %s", netip.PrefixFrom(gw4, node.PodSubnet4.Bits()), PodBridge),
		fmt.Sprintf("addr add %s dev %s nodad", netip.PrefixFrom(gw6, node.PodSubnet6.Bits()), PodBridge),
		fmt.Sprintf("link set %s up", PodBridge),
	}
	if err := ipBatch(ctx, node.Name, lines...); err != nil {
		return err
	}
	var routes []string
	for _, other := range n.Nodes {
		if other == node {
			continue
		}
		routes = append(routes,
			fmt.Sprintf("%s via %s dev eth0", other.PodSubnet4, other.IPv4),
			fmt.Sprintf("%s via %s dev eth0", other.PodSubnet6, other.IPv6),
		)
	}
	return node.addRoutes(ctx, routes...)
}

// AddPod adds a pod called name (its Label; a Kubernetes Pod name, say) to node, a node
// of n, and returns it once it can send and receive on IPv4 and IPv6: a namespace with
// lo up and eth0, a veth whose peer is a port of the node's PodBridge, with the lowest
// free addresses of the node's pod range and default routes via the range's gateways.
// It turns IPv4 and IPv6 forwarding on in the node's namespace, for the node to route
// the pod's traffic; forwarding stays on after the pod is gone. On error nothing of the
// pod is left behind. Close removes the pods that RemovePod has not.
func (n *Network) AddPod(node *Host, name string) (*Host, error) {
	if name == "" {
		return nil, errors.New("add pod: empty name")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("add pod %s: network is closed", name)
	}
	if node == nil || !isNode(n, node) {
		return nil, fmt.Errorf("add pod %s: the host given is not a node of the network", name)
	}
	k, ok := n.freePodNumber(node)
	if !ok {
		return nil, fmt.Errorf("add pod %s on %s: all %d addresses of %s are taken", name, node.Label, lastPod-firstPod+1, node.PodSubnet4)
	}
	v4, v6, mac := podAddrs(node, k)
	pod := &Host{
		Name:      fmt.Sprintf("%s%s-pod%d", n.prefix, node.Label, k),
		Label:     name,
		Interface: "eth0",
		MAC:       mac,
		IPv4:      v4,
		IPv6:      v6,
		Node:      node,
		num:       k,
		port:      fmt.Sprintf("veth%d", k),
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := runCmd(ctx, "ip", "netns", "add", pod.Name); err != nil {
		return nil, fmt.Errorf("add pod %s on %s: %w", name, node.Label, err)
	}
	// Recorded at once, so that Close removes it should the rest fail and so would the
	// removal below.
	n.created = append(n.created, pod.Name)
	if err := buildPod(ctx, pod); err != nil {
		err = fmt.Errorf("add pod %s on %s: %w", name, node.Label, err)
		return nil, errors.Join(err, n.removePod(pod))
	}
	n.pods = append(n.pods, pod)
	return pod, nil
}

// freePodNumber returns the lowest pod host number of node that no pod of n has. Reusing
// numbers keeps a node's pods within its range however many come and go, as a node's
// IPAM does; a reused address gets the same MAC, so no neighbour entry goes stale.
func (n *Network) freePodNumber(node *Host) (byte, bool) {
	for k := firstPod; k <= lastPod; k++ {
		if !slices.ContainsFunc(n.pods, func(p *Host) bool { return p.Node == node && int(p.num) == k }) {
			return byte(k), true
		}
	}
	return 0, false
}

// forwarding turns on IPv4 and IPv6 forwarding, which a node with pods needs to route
// between eth0 and its PodBridge. Writing ip_forward also resets all/accept_redirects,
// and writing all/forwarding sets every interface's and default's forwarding; the ARP
// settings of a node stay as they are. Create leaves forwarding alone, so that nodes
// without pods keep what a new namespace has.
var forwarding = []sysctl{
	{"net/ipv4/ip_forward", "1"},
	{"net/ipv6/conf/all/forwarding", "1"},
}

// buildPod creates the links, addresses and routes of pod, whose namespace exists, and
// turns forwarding on in its node.
func buildPod(ctx context.Context, pod *Host) error {
	node := pod.Node
	if err := node.setSysctls(forwarding); err != nil {
		return err
	}
	// Before eth0 exists, so that it inherits them: no duplicate address detection, for
	// the addresses to be usable at once.
	if err := pod.setSysctls(baseSysctls(false)); err != nil {
		return err
	}
	// Created from the pod's side, the peer straight in the node's namespace, where it
	// inherits the node's defaults (no DAD) until IPv6 is off on it below.
	err := ipBatch(ctx, pod.Name,
		"link set lo up",
		fmt.Sprintf("link add eth0 address %s type veth peer name %s netns %s", pod.MAC, pod.port, node.Name),
		fmt.Sprintf("addr add %s dev eth0", netip.PrefixFrom(pod.IPv4, node.PodSubnet4.Bits())),
		fmt.Sprintf("addr add %s dev eth0 nodad", netip.PrefixFrom(pod.IPv6, node.PodSubnet6.Bits())),
		"link set eth0 up",
	)
	if err != nil {
		return err
	}
	// The port is a switch port: no addresses, no router solicitations or MLD reports.
	if err := node.setSysctls([]sysctl{{"net/ipv6/conf/" + pod.port + "/disable_ipv6", "1"}}); err != nil {
		return err
	}
	if err := ipBatch(ctx, node.Name, fmt.Sprintf("link set %s master %s up", pod.port, PodBridge)); err != nil {
		return err
	}
	gw4, gw6, _ := podAddrs(node, podGateway)
	err = ipBatch(ctx, pod.Name,
		fmt.Sprintf("route add default via %s dev eth0", gw4),
		fmt.Sprintf("route add default via %s dev eth0", gw6),
	)
	if err != nil {
		return err
	}
	// Once the port is up, eth0 has carrier and gets its link-local address.
	pod.LinkLocal, err = pod.linkLocal(ctx)
	return err
}

// RemovePod removes a pod that AddPod returned: its namespace, after killing every
// process inside, and its port on the node's PodBridge, at once even while sockets
// opened inside with Do keep what is left of the namespace alive. Its addresses are free
// for the next pod of the node. Removing a pod again, or after Close, does nothing.
func (n *Network) RemovePod(pod *Host) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		// Close has removed it.
		return nil
	}
	i := slices.Index(n.pods, pod)
	if i < 0 {
		if pod != nil && pod.Node != nil && slices.Contains(n.Nodes, pod.Node) {
			return nil // removed already
		}
		return errors.New("remove pod: not a pod of this network")
	}
	if err := n.removePod(pod); err != nil {
		return err
	}
	n.pods = slices.Delete(n.pods, i, i+1)
	return nil
}

// removePod deletes pod's port on the node's bridge and its namespace. Deleting one end
// of a veth deletes both; the port goes first because the pod's namespace, and so its
// eth0, lives on while anything holds it.
func (n *Network) removePod(pod *Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var errs []error
	if _, err := pod.Node.ip(ctx, "link", "del", pod.port); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, fmt.Errorf("remove pod %s: %w", pod.Label, err))
	}
	if err := deleteNamespace(pod.Name); err != nil {
		errs = append(errs, fmt.Errorf("remove pod %s: %w", pod.Label, err))
	} else {
		n.created = slices.DeleteFunc(n.created, func(name string) bool { return name == pod.Name })
	}
	return errors.Join(errs...)
}

// Pods returns the pods of n that are not removed, in the order they were added.
func (n *Network) Pods() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.pods)
}
