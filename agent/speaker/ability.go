package speaker

import (
	"net/netip"
	"slices"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Unable returns the pools and families of pools this node cannot announce on links now,
// sorted, for the ccm to choose other nodes for their addresses. A pool that names
// interfaces needs one of them up with an address of the family; any other pool needs an
// up Ethernet link with a subnet of the family that holds some of its addresses, which is
// also where Choose announces them.
func Unable(pools []config.Pool, links []Link) []probe.Unable {
	var out []probe.Unable
	for _, p := range pools {
		for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
			if !slices.ContainsFunc(p.Ranges, func(r iprange.Range) bool { return r.Family() == f }) {
				continue
			}
			if u, ok := unable(p, f, links); ok {
				out = append(out, u)
			}
		}
	}
	probe.SortUnable(out)
	return out
}

// unable says why the pool's addresses of family f cannot be announced on links, if so.
func unable(p config.Pool, f iprange.Family, links []Link) (probe.Unable, bool) {
	u := probe.Unable{Pool: p.Name, Family: f, Reason: probe.NoUpInterface}
	for _, l := range links {
		if !l.Up || l.Loopback || len(l.MAC) != 6 {
			continue
		}
		if len(p.Interfaces) > 0 {
			if !slices.Contains(p.Interfaces, l.Name) {
				continue
			}
			if hasFamily(l, f) {
				return probe.Unable{}, false
			}
			// Up, but without an address of the family: as a link that went down and up
			// comes back without its IPv6 addresses.
			u.Reason, u.Interface = probe.NoAddress, l.Name
			continue
		}
		if holdsPool(l, p, f) {
			return probe.Unable{}, false
		}
		if holdsPool(l, p, other(f)) {
			// The link that carries the pool's other family has lost this one.
			u.Reason, u.Interface = probe.NoAddress, l.Name
		}
	}
	return u, true
}

// hasFamily reports whether l has an address of family f.
func hasFamily(l Link, f iprange.Family) bool {
	return slices.ContainsFunc(l.Subnets, func(s netip.Prefix) bool { return iprange.FamilyOf(s.Addr()) == f })
}

// holdsPool reports whether one of l's subnets of family f, not a host route, holds an
// address of p.
func holdsPool(l Link, p config.Pool, f iprange.Family) bool {
	for _, s := range l.Subnets {
		if iprange.FamilyOf(s.Addr()) != f || s.Bits() == s.Addr().BitLen() {
			continue
		}
		subnet := iprange.FromPrefix(s.Masked())
		if slices.ContainsFunc(p.Ranges, subnet.Overlaps) {
			return true
		}
	}
	return false
}

func other(f iprange.Family) iprange.Family {
	if f == iprange.IPv4 {
		return iprange.IPv6
	}
	return iprange.IPv4
}
