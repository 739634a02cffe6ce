package ipam

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Assign gives req.Service the addresses req asks for and returns them in the order of
// req.Families. Addresses the Service already holds are kept while they still satisfy the
// request. Assign is all or nothing: on error the Service keeps exactly what it had.
func (a *Allocator) Assign(req Request) ([]netip.Addr, error) {
	if err := checkRequest(&req); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()

	old := a.services[req.Service]
	var want, fresh [2]netip.Addr
	for _, f := range req.Families {
		addr, isFresh, err := a.choose(&req, f, old)
		if err != nil {
			for _, addr := range fresh {
				if addr.IsValid() {
					a.spanOf(addr).free(addr)
				}
			}
			return nil, err
		}
		want[f] = addr
		if isFresh {
			fresh[f] = addr
		}
	}
	if old == nil || old.addrs != want || !old.share.equal(req.SharingKey, req.Ports) {
		a.replace(old, &holder{service: req.Service, addrs: want, share: newSharing(req.SharingKey, req.Ports)}, fresh)
	}
	out := make([]netip.Addr, len(req.Families))
	for i, f := range req.Families {
		out[i] = want[f]
	}
	return out, nil
}

func checkRequest(req *Request) error {
	if req.Service == "" {
		return &InvalidRequestError{Reason: "no Service named"}
	}
	if len(req.Families) == 0 || len(req.Families) > 2 || (len(req.Families) == 2 && req.Families[0] == req.Families[1]) {
		return &InvalidRequestError{Reason: fmt.Sprintf("families %v: want one or two different families", req.Families)}
	}
	var seen [2]bool
	for _, addr := range req.Addresses {
		if err := iprange.CheckServiceAddress(addr); err != nil {
			return &InvalidRequestError{Reason: err.Error()}
		}
		f := iprange.FamilyOf(addr)
		if seen[f] {
			return &InvalidRequestError{Reason: fmt.Sprintf("more than one %s address requested", f)}
		}
		seen[f] = true
		if !slices.Contains(req.Families, f) {
			return &InvalidRequestError{Reason: fmt.Sprintf("address %s requested, but the Service has no %s family", addr, f)}
		}
	}
	return nil
}

// choose picks the address of family f for req. A fresh address comes from a span and is
// already counted as taken there.
func (a *Allocator) choose(req *Request, f iprange.Family, old *holder) (addr netip.Addr, fresh bool, err error) {
	var group netip.Addr
	if req.SharingKey != "" {
		if g, ok := a.groups[groupKey{req.SharingKey, f}]; ok && a.heldByOthers(g, req.Service) {
			group = g
		}
	}
	for _, want := range req.Addresses {
		if iprange.FamilyOf(want) != f {
			continue
		}
		if group.IsValid() && group != want {
			return netip.Addr{}, false, &SharedAddressError{SharingKey: req.SharingKey, Want: want, Shared: group}
		}
		return want, false, a.usable(req, want)
	}
	if group.IsValid() {
		return group, false, a.usable(req, group)
	}
	if old != nil {
		if cur := old.addrs[f]; cur.IsValid() && a.usable(req, cur) == nil {
			return cur, false, nil
		}
	}
	addr, err = a.allocate(req, f)
	return addr, err == nil, err
}

// usable checks that req may hold addr: the pool rules admit it, and whoever holds addr
// already shares it with req.
func (a *Allocator) usable(req *Request, addr netip.Addr) error {
	if err := a.admits(req, addr); err != nil {
		return err
	}
	for h := range a.holders(addr) {
		if h.service == req.Service {
			continue
		}
		if h.share == nil || h.share.key != req.SharingKey || req.SharingKey == "" {
			return &InUseError{Addr: addr, Holder: h.service}
		}
		if p, ok := overlap(h.share.ports, req.Ports); ok {
			return &PortConflictError{Addr: addr, Holder: h.service, Port: p}
		}
	}
	return nil
}

// admits checks the pool rules for req and addr: addr is in the pool req names (or any
// pool), and that pool admits the Service.
func (a *Allocator) admits(req *Request, addr netip.Addr) error {
	s := a.spanOf(addr)
	if s == nil {
		return &NotInPoolError{Addr: addr}
	}
	if req.Pool != "" && s.pool.cfg.Name != req.Pool {
		return &NotInPoolError{Addr: addr, Pool: req.Pool}
	}
	if !s.pool.cfg.AllowsService(req.Namespace, req.Labels) {
		return &NotAllowedError{Pool: s.pool.cfg.Name, Namespace: req.Namespace}
	}
	return nil
}

// allocate takes the lowest free address of family f from the pool req names, or else from
// the first auto-assign pool that admits the Service and has one.
func (a *Allocator) allocate(req *Request, f iprange.Family) (netip.Addr, error) {
	taken := func(addr netip.Addr) bool { _, ok := a.owners[keyOf(addr)]; return ok }
	if req.Pool != "" {
		p := a.byName[req.Pool]
		switch {
		case p == nil:
			return netip.Addr{}, &UnknownPoolError{Pool: req.Pool}
		case !p.cfg.AllowsService(req.Namespace, req.Labels):
			return netip.Addr{}, &NotAllowedError{Pool: req.Pool, Namespace: req.Namespace}
		case p.spans[f] == nil:
			return netip.Addr{}, &FamilyNotOfferedError{Pool: req.Pool, Family: f}
		}
		addr, ok := p.spans[f].next(taken)
		if !ok {
			return netip.Addr{}, &ExhaustedError{Pool: req.Pool, Family: f}
		}
		p.spans[f].take(addr)
		return addr, nil
	}
	offered := false
	for _, p := range a.pools {
		s := p.spans[f]
		if s == nil || !p.cfg.AutoAssign || !p.cfg.AllowsService(req.Namespace, req.Labels) {
			continue
		}
		offered = true
		if addr, ok := s.next(taken); ok {
			s.take(addr)
			return addr, nil
		}
	}
	if !offered {
		return netip.Addr{}, &FamilyNotOfferedError{Family: f}
	}
	return netip.Addr{}, &ExhaustedError{Family: f}
}

// replace swaps old (nil for a new Service) for h in every address either holds. Addresses
// in fresh are already taken in their span.
func (a *Allocator) replace(old, h *holder, fresh [2]netip.Addr) {
	for f := range h.addrs {
		var was netip.Addr
		if old != nil {
			was = old.addrs[f]
		}
		now := h.addrs[f]
		switch {
		case was == now && now.IsValid():
			a.swap(now, old, h)
		default:
			if was.IsValid() {
				a.detach(old, was)
			}
			if now.IsValid() {
				a.attach(h, now, fresh[f] == now)
			}
		}
	}
	if h.addrs == [2]netip.Addr{} {
		delete(a.services, h.service)
		return
	}
	a.services[h.service] = h
}

// Release frees every address of service. It reports whether the Service held any.
func (a *Allocator) Release(service string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.services[service]
	if h == nil {
		return false
	}
	for _, addr := range h.addrs {
		if addr.IsValid() {
			a.detach(h, addr)
		}
	}
	delete(a.services, service)
	return true
}

// attach adds h to the holders of addr; taken says the span already counts addr as used.
func (a *Allocator) attach(h *holder, addr netip.Addr, taken bool) {
	if _, ok := a.owners[keyOf(addr)]; ok {
		a.sharers[addr] = append(a.sharers[addr], h)
	} else {
		a.owners[keyOf(addr)] = h
		if !taken {
			a.spanOf(addr).take(addr)
		}
	}
	if h.share != nil {
		a.groups[groupKey{h.share.key, iprange.FamilyOf(addr)}] = addr
	}
}

// detach removes h from the holders of addr, and frees addr when h was the last.
func (a *Allocator) detach(h *holder, addr netip.Addr) {
	rest := a.sharers[addr]
	if a.owners[keyOf(addr)] == h {
		if len(rest) == 0 {
			delete(a.owners, keyOf(addr))
			a.spanOf(addr).free(addr)
			if h.share != nil {
				k := groupKey{h.share.key, iprange.FamilyOf(addr)}
				if a.groups[k] == addr {
					delete(a.groups, k)
				}
			}
			return
		}
		a.owners[keyOf(addr)], rest = rest[0], rest[1:]
	} else {
		rest = slices.DeleteFunc(rest, func(o *holder) bool { return o == h })
	}
	if len(rest) == 0 {
		delete(a.sharers, addr)
	} else {
		a.sharers[addr] = rest
	}
}

// swap puts h in old's place among the holders of addr.
func (a *Allocator) swap(addr netip.Addr, old, h *holder) {
	if a.owners[keyOf(addr)] == old {
		a.owners[keyOf(addr)] = h
	} else {
		rest := a.sharers[addr]
		rest[slices.Index(rest, old)] = h
	}
	// A sharing key can only change on an address nobody else holds, so the old key's
	// group is gone with it.
	if old.share != nil && (h.share == nil || h.share.key != old.share.key) {
		if k := (groupKey{old.share.key, iprange.FamilyOf(addr)}); a.groups[k] == addr {
			delete(a.groups, k)
		}
	}
	if h.share != nil {
		a.groups[groupKey{h.share.key, iprange.FamilyOf(addr)}] = addr
	}
}

// holders yields every holder of addr.
func (a *Allocator) holders(addr netip.Addr) func(yield func(*holder) bool) {
	return func(yield func(*holder) bool) {
		h, ok := a.owners[keyOf(addr)]
		if !ok || !yield(h) {
			return
		}
		for _, h := range a.sharers[addr] {
			if !yield(h) {
				return
			}
		}
	}
}

func (a *Allocator) heldByOthers(addr netip.Addr, service string) bool {
	for h := range a.holders(addr) {
		if h.service != service {
			return true
		}
	}
	return false
}

func newSharing(key string, ports []Port) *sharing {
	if key == "" {
		return nil
	}
	return &sharing{key: key, ports: slices.Clone(ports)}
}

func (s *sharing) equal(key string, ports []Port) bool {
	if s == nil {
		return key == ""
	}
	return s.key == key && slices.Equal(s.ports, ports)
}

// overlap returns a port that both lists hold.
func overlap(a, b []Port) (Port, bool) {
	for _, p := range a {
		if slices.Contains(b, p) {
			return p, true
		}
	}
	return Port{}, false
}

// Addresses returns the addresses service holds, IPv4 first.
func (a *Allocator) Addresses(service string) []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.services[service]
	if h == nil {
		return nil
	}
	var out []netip.Addr
	for _, addr := range h.addrs {
		if addr.IsValid() {
			out = append(out, addr)
		}
	}
	return out
}

// Holders returns the Services holding addr, the first holder first.
func (a *Allocator) Holders(addr netip.Addr) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for h := range a.holders(addr) {
		out = append(out, h.service)
	}
	return out
}

// Stats returns the figures of every family of every pool, in config order.
func (a *Allocator) Stats() []Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Stats
	for _, p := range a.pools {
		for f, s := range p.spans {
			if s == nil {
				continue
			}
			used := big.NewInt(int64(s.used))
			out = append(out, Stats{
				Pool:   p.cfg.Name,
				Family: iprange.Family(f),
				Size:   new(big.Int).Set(s.size),
				Used:   s.used,
				Free:   used.Sub(s.size, used),
			})
		}
	}
	return out
}
