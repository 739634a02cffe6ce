package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// The routed client's subnet: TEST-NET-3 (RFC 5737) and a ULA /64. It lies outside the
// /16 around the nodes' addresses on purpose: Kubernetes' LoadBalancer specs take an
// address inside the nodes' /16 for a node's, when they check that a Service with
// externalTrafficPolicy Local kept the client's address.
var (
	routedSubnet4 = netip.MustParsePrefix("203.0.113.0/24")
	routedSubnet6 = netip.MustParsePrefix("fd00:203:0:113::/64")
)

// routerHost is the router's host number on the segment.
const routerHost = 253

// AddRouter adds a router and a client behind it, the way most clients of a Service reach
// its address: through a router whose own neighbour entry for the address is what a
// failover has to change. The router is a namespace with eth0 on the segment (host number
// 253: 198.18.0.253, fd00:198:18::fd) and eth1 on a subnet of its own, 203.0.113.0/24 and
// fd00:203:0:113::/64, where it is .1 and ::1, and forwards between the two; its
// neighbour settings are the kernel's defaults. The routed client, RoutedClient, is .2
// and ::2 on that subnet with default routes via the router; every node, the on-link
// client and the bridge's namespace route the subnet via the router, as their default
// route would in a real network. It returns once both can send and receive.
func (n *Network) AddRouter() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("add router: network is closed")
	}
	if n.Router != nil {
		return errors.New("add router: the network has one already")
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	router := newHost(n.prefix, "router", "eth0", routerHost)
	client := &Host{
		Name:      n.prefix + "routed",
		Label:     "routed",
		Interface: "eth0",
		MAC:       net.HardwareAddr{0x02, 0, 0x02, 0, 0, 2},
		IPv4:      routedAddr(routedSubnet4, 2),
		IPv6:      routedAddr(routedSubnet6, 2),
	}
	gw4, gw6 := routedAddr(routedSubnet4, 1), routedAddr(routedSubnet6, 1)
	for _, h := range []*Host{router, client} {
		if _, err := runCmd(ctx, "ip", "netns", "add", h.Name); err != nil {
			return fmt.Errorf("add router: %w", err)
		}
		n.created = append(n.created, h.Name)
		if err := h.setSysctls(baseSysctls(false)); err != nil {
			return fmt.Errorf("add router: %w", err)
		}
	}
	if err := n.attach(ctx, router); err != nil {
		return fmt.Errorf("add router: %w", err)
	}
	err := ipBatch(ctx, router.Name,
		fmt.Sprintf("link add eth1 address 02:00:02:00:00:01 type veth peer name eth0 netns %s", client.Name),
		fmt.Sprintf("addr add %s dev eth1", netip.PrefixFrom(gw4, routedSubnet4.Bits())),
		fmt.Sprintf("addr add %s dev eth1 nodad", netip.PrefixFrom(gw6, routedSubnet6.Bits())),
		"link set eth1 up",
	)
	if err != nil {
		return fmt.Errorf("add router: %w", err)
	}
	if err := router.EnableForwarding(); err != nil {
		return fmt.Errorf("add router: %w", err)
	}
	err = ipBatch(ctx, client.Name,
		"link set lo up",
		fmt.Sprintf("link set eth0 address %s", client.MAC),
		fmt.Sprintf("addr add %s dev eth0", netip.PrefixFrom(client.IPv4, routedSubnet4.Bits())),
		fmt.Sprintf("addr add %s dev eth0 nodad", netip.PrefixFrom(client.IPv6, routedSubnet6.Bits())),
		"link set eth0 up",
		fmt.Sprintf("route add default via %s", gw4),
		fmt.Sprintf("route add default via %s", gw6),
	)
	if err != nil {
		return fmt.Errorf("add router: %w", err)
	}
	for _, h := range append(n.hosts(), n.Bridge) {
		err := h.addRoutes(ctx,
			fmt.Sprintf("%s via %s dev %s", routedSubnet4, router.IPv4, h.Interface),
			fmt.Sprintf("%s via %s dev %s", routedSubnet6, router.IPv6, h.Interface),
		)
		if err != nil {
			return fmt.Errorf("add router: %w", err)
		}
	}
	for _, h := range []*Host{router, client} {
		if h.LinkLocal, err = h.linkLocal(ctx); err != nil {
			return fmt.Errorf("add router: %w", err)
		}
	}
	n.Router, n.RoutedClient = router, client
	return nil
}

// routedAddr is host number k of the routed client's subnet p.
func routedAddr(p netip.Prefix, k byte) netip.Addr {
	if p.Addr().Is4() {
		a := p.Addr().As4()
		a[3] = k
		return netip.AddrFrom4(a)
	}
	a := p.Addr().As16()
	a[15] = k
	return netip.AddrFrom16(a)
}
