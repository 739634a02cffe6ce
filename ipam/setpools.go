package ipam

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Dropped is an address that a Service lost in SetPools because no pool contains it any more.
type Dropped struct {
	Service string
	Addr    netip.Addr
}

// SetPools replaces the pools, for a cloud-config that changed: pools may be added, removed,
// resized or renamed. pools must have passed config validation, as for New. Every Service
// keeps the addresses that a new pool still contains, even where that pool's rules would no
// longer hand them out: the allocator gave them under the rules of their time, and taking
// them would be an outage. An address that no pool contains any more is released and
// reported, sorted by Service then address.
//
// Each kept address keeps its holders in their order, the first holder first. The
// allocator is then as Restore of the kept assignments, where the new pools' rules admit
// them, leaves it, listed in an order that
// puts the holders of every address in that order. Such an order exists unless two
// dual-stack Services that share both addresses hold them in opposite orders, which
// Restore could not rebuild.
func (a *Allocator) SetPools(pools []config.Pool) []Dropped {
	a.mu.Lock()
	defer a.mu.Unlock()
	owners, sharers, services := a.owners, a.sharers, a.services
	a.cfg = slices.Clone(pools)
	a.poolsVersion++
	a.reset()

	var dropped []Dropped
	kept := make(map[*holder]*holder, len(services))
	for _, h := range services {
		k := h
		for f, addr := range h.addrs {
			if addr.IsValid() && a.spanOf(addr) == nil {
				if k == h {
					// A holder is replaced, never changed.
					c := *h
					k = &c
				}
				k.addrs[f] = netip.Addr{}
				dropped = append(dropped, Dropped{Service: h.service, Addr: addr})
			}
		}
		if k.addrs != [2]netip.Addr{} {
			kept[h] = k
			a.services[k.service] = k
		}
	}

	// Attaching in address order makes the sharing groups deterministic even where a
	// restored state has two addresses for one key.
	var addrs []netip.Addr
	for old, h := range kept {
		for _, addr := range h.addrs {
			if addr.IsValid() && owners[keyOf(addr)] == old {
				addrs = append(addrs, addr)
			}
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, addr := range addrs {
		a.attach(kept[owners[keyOf(addr)]], addr, false)
		for _, h := range sharers[addr] {
			a.attach(kept[h], addr, false)
		}
	}

	slices.SortFunc(dropped, func(x, y Dropped) int {
		return cmp.Or(cmp.Compare(x.Service, y.Service), x.Addr.Compare(y.Addr))
	})
	return dropped
}
