package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// firstExtraHost is the host number of the first host AddHost adds; the next get the
// numbers below it, down to the client's.
const firstExtraHost = 240

// AddHost adds a host named label to the segment, with eth0 on the bridge and host
// number 240, 239, … (198.18.0.240, fd00:198:18::f0): a host outside the cluster that is
// not its client, such as one that takes a Service address for its own. Its settings are
// the client's; Close removes it with the rest.
func (n *Network) AddHost(label string) (*Host, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("add host: network is closed")
	}
	num := firstExtraHost - len(n.extra)
	if num <= clientHost {
		return nil, fmt.Errorf("add host %s: the segment has room for %d extra hosts", label, firstExtraHost-clientHost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	h := newHost(n.prefix, label, "eth0", byte(num))
	if _, err := runCmd(ctx, "ip", "netns", "add", h.Name); err != nil {
		return nil, fmt.Errorf("add host %s: %w", label, err)
	}
	n.created = append(n.created, h.Name)
	if err := h.setSysctls(baseSysctls(false)); err != nil {
		return nil, fmt.Errorf("add host %s: %w", label, err)
	}
	if err := n.attach(ctx, h); err != nil {
		return nil, fmt.Errorf("add host %s: %w", label, err)
	}
	var err error
	if h.LinkLocal, err = h.linkLocal(ctx); err != nil {
		return nil, fmt.Errorf("add host %s: %w", label, err)
	}
	n.extra = append(n.extra, h)
	return h, nil
}

// attach gives a host added after Create its eth0, a port of the bridge, with its
// addresses on the segment.
func (n *Network) attach(ctx context.Context, h *Host) error {
	err := ipBatch(ctx, h.Name,
		"link set lo up",
		fmt.Sprintf("link add eth0 address %s type veth peer name %s netns %s", h.MAC, h.Label, n.Bridge.Name),
		fmt.Sprintf("addr add %s dev eth0", netip.PrefixFrom(h.IPv4, subnet4.Bits())),
		fmt.Sprintf("addr add %s dev eth0 nodad", netip.PrefixFrom(h.IPv6, subnet6.Bits())),
		"link set eth0 up",
	)
	if err != nil {
		return err
	}
	if err := n.Bridge.setSysctls([]sysctl{{"net/ipv6/conf/" + h.Label + "/disable_ipv6", "1"}}); err != nil {
		return err
	}
	return ipBatch(ctx, n.Bridge.Name, fmt.Sprintf("link set %s master br0 up", h.Label))
}

// SetSysctl writes one setting of the host's namespace, such as
// "net/ipv4/conf/eth0/arp_notify".
func (h *Host) SetSysctl(path, value string) error {
	return h.setSysctls([]sysctl{{path, value}})
}

// IP runs ip(8) with args in the host's namespace and returns its output.
func (h *Host) IP(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	return h.ip(ctx, args...)
}
