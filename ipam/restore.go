package ipam

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// NotRestoredError reports, from Restore, an address (or, when Addr is the zero Addr, a
// whole assignment) that Service does not get back for Reason: a *NotInPoolError or a
// *NotAllowedError for the pool rules Assign applies, an *InvalidRequestError for an
// assignment that contradicts itself.
type NotRestoredError struct {
	Service string
	Addr    netip.Addr
	Reason  error
}

func (e *NotRestoredError) Error() string { return fmt.Sprintf("%s: %v", e.Service, e.Reason) }

func (e *NotRestoredError) Unwrap() error { return e.Reason }

// Restore discards all state and rebuilds it from assignments, in order, under the rules
// Assign applies: an address outside every pool, outside the pool the Service names, in a
// pool that does not admit the Service, or held by an earlier assignment that may not
// share it, is not restored, and neither is a second address of one family. Each is
// reported in the returned error (errors.Join of *DuplicateError and *NotRestoredError,
// each naming the Service); everything else is restored.
//
// The new state is built apart and swapped in, so that allocations wait for the swap
// alone; an allocation made meanwhile is discarded with the rest. It costs O(n log n) in
// the addresses and ports restored.
func (a *Allocator) Restore(assignments []Assignment) error {
	for {
		a.mu.Lock()
		cfg, version := a.cfg, a.poolsVersion
		a.mu.Unlock()

		b := New(cfg)
		errs := b.adopt(assignments)

		a.mu.Lock()
		if a.poolsVersion == version {
			a.state = b.state
			a.mu.Unlock()
			return errors.Join(errs...)
		}
		// SetPools ran meanwhile: build again over its pools.
		a.mu.Unlock()
	}
}

// adopt attaches assignments, in order, to a, a new allocator no one else sees yet, and
// returns what it could not attach.
func (a *Allocator) adopt(assignments []Assignment) []error {
	var errs []error
	// ports says who uses each port of a shared address, so that a Service joining an
	// address shared by thousands is checked against its own ports only.
	ports := make(map[netip.Addr]map[Port]string)
	for _, as := range assignments {
		if a.services[as.Service] != nil {
			errs = append(errs, &NotRestoredError{Service: as.Service, Reason: &InvalidRequestError{Reason: "listed more than once"}})
			continue
		}
		h := &holder{service: as.Service, share: newSharing(as.SharingKey, as.Ports)}
		req := Request{Service: as.Service, Namespace: as.Namespace, Labels: as.Labels, Pool: as.Pool, SharingKey: as.SharingKey, Ports: as.Ports}
		for _, addr := range as.Addresses {
			f := iprange.FamilyOf(addr)
			if h.addrs[f].IsValid() {
				errs = append(errs, &NotRestoredError{Service: as.Service, Addr: addr,
					Reason: &InvalidRequestError{Reason: fmt.Sprintf("holds both %s and %s", h.addrs[f], addr)}})
				continue
			}
			if err := a.admits(&req, addr); err != nil {
				errs = append(errs, &NotRestoredError{Service: as.Service, Addr: addr, Reason: err})
				continue
			}
			if err := a.sharable(&req, addr, ports[addr]); err != nil {
				errs = append(errs, &DuplicateError{Addr: addr, Service: as.Service, Holder: a.owners[keyOf(addr)].service, Reason: err})
				continue
			}
			h.addrs[f] = addr
			a.attach(h, addr, false)
			if h.share != nil {
				if ports[addr] == nil {
					ports[addr] = make(map[Port]string, len(h.share.ports))
				}
				for _, p := range h.share.ports {
					ports[addr][p] = h.service
				}
			}
		}
		if h.addrs != [2]netip.Addr{} {
			a.services[as.Service] = h
		}
	}
	return errs
}

// sharable is the holders' half of usable, for a Service not yet among them, with used
// saying who uses each port of addr: every holder of an address has the same sharing key,
// so the first holder's key answers for all.
func (a *Allocator) sharable(req *Request, addr netip.Addr, used map[Port]string) error {
	h, ok := a.owners[keyOf(addr)]
	if !ok {
		return nil
	}
	if h.share == nil || req.SharingKey == "" || h.share.key != req.SharingKey {
		return &InUseError{Addr: addr, Holder: h.service}
	}
	for _, p := range req.Ports {
		if holder, ok := used[p]; ok {
			return &PortConflictError{Addr: addr, Holder: holder, Port: p}
		}
	}
	return nil
}
