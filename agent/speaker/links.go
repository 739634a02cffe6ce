package speaker

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// Link is what the speaker needs to know of a network interface.
type Link struct {
	// Name is the interface name.
	Name string
	// Index is the interface index; a new index under the same name is a new interface.
	Index int
	// MAC is the hardware address; only Ethernet links (6 bytes) are announced on.
	MAC net.HardwareAddr
	// MTU is the link's MTU.
	MTU int
	// Up is true when the link is administratively up and has a carrier.
	Up bool
	// Loopback is true for loopback interfaces, which are never announced on.
	Loopback bool
	// Subnets are the connected subnets of the link's addresses.
	Subnets []netip.Prefix
}

// Choose returns the names of the links to announce addr on, sorted: the pool's
// interfaces if it names some, else every link whose connected subnet contains addr. Only
// Ethernet links that are up qualify. A host route (a /32 or /128, like the addresses
// kube-proxy puts on its dummy interface) is not a subnet anything could be announced on.
func Choose(addr netip.Addr, pool []string, links []Link) []string {
	var out []string
	for _, l := range links {
		if !l.Up || l.Loopback || len(l.MAC) != 6 {
			continue
		}
		if len(pool) > 0 {
			if slices.Contains(pool, l.Name) {
				out = append(out, l.Name)
			}
			continue
		}
		for _, p := range l.Subnets {
			if p.Bits() < addr.BitLen() && p.Contains(addr) {
				out = append(out, l.Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// readLinks returns the links of the network namespace the agent runs in, with two
// netlink dumps whatever the number of interfaces (a node has one per pod).
func readLinks() ([]Link, error) {
	nls, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	subnets := map[int][]netip.Prefix{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil || ip.IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		p, err := ip.Unmap().Prefix(ones)
		if err == nil {
			subnets[a.LinkIndex] = append(subnets[a.LinkIndex], p)
		}
	}
	links := make([]Link, 0, len(nls))
	for _, nl := range nls {
		at := nl.Attrs()
		links = append(links, Link{
			Name:     at.Name,
			Index:    at.Index,
			MAC:      at.HardwareAddr,
			MTU:      at.MTU,
			Up:       at.Flags&net.FlagUp != 0 && (at.OperState == netlink.OperUp || at.OperState == netlink.OperUnknown),
			Loopback: at.Flags&net.FlagLoopback != 0,
			Subnets:  subnets[at.Index],
		})
	}
	slices.SortFunc(links, func(a, b Link) int { return cmp.Compare(a.Name, b.Name) })
	return links, nil
}

// Links returns the links the node would announce addr on, for a pool announced on the
// interfaces pool (any, when empty), as Choose picks them: a copy, for the wire check.
func (s *Speaker) Links(addr netip.Addr, pool []string) []Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Link
	for _, name := range Choose(addr, pool, s.links) {
		if i := slices.IndexFunc(s.links, func(l Link) bool { return l.Name == name }); i >= 0 {
			l := s.links[i]
			l.MAC, l.Subnets = slices.Clone(l.MAC), slices.Clone(l.Subnets)
			out = append(out, l)
		}
	}
	return out
}
