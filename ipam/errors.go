package ipam

import (
	"fmt"
	"net/netip"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// UnknownPoolError is returned when a request names a pool the cloud-config does not define.
type UnknownPoolError struct {
	Pool string
}

func (e *UnknownPoolError) Error() string {
	return fmt.Sprintf("pool %q is not defined in the cloud-config", e.Pool)
}

// NotAllowedError is returned when a pool's namespaces or serviceSelector exclude the Service.
type NotAllowedError struct {
	Pool      string
	Namespace string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("pool %q does not allow Services in namespace %q with these labels (see its namespaces and serviceSelector)", e.Pool, e.Namespace)
}

// FamilyNotOfferedError is returned when no pool the request may use has addresses of a family.
// Pool is empty when the request named no pool and no auto-assign pool offers the family.
type FamilyNotOfferedError struct {
	Pool   string
	Family iprange.Family
}

func (e *FamilyNotOfferedError) Error() string {
	if e.Pool == "" {
		return fmt.Sprintf("no auto-assign pool open to this Service has %s addresses", e.Family)
	}
	return fmt.Sprintf("pool %q has no %s addresses", e.Pool, e.Family)
}

// ExhaustedError is returned when every address of a family is taken. Pool is empty when
// the request named no pool and every auto-assign pool open to it is full.
type ExhaustedError struct {
	Pool   string
	Family iprange.Family
}

func (e *ExhaustedError) Error() string {
	if e.Pool == "" {
		return fmt.Sprintf("every auto-assign pool open to this Service has run out of %s addresses", e.Family)
	}
	return fmt.Sprintf("pool %q has no free %s address", e.Pool, e.Family)
}

// NotInPoolError is returned for a requested address outside every pool (Pool is empty), or
// outside the pool the request named.
type NotInPoolError struct {
	Addr netip.Addr
	Pool string
}

func (e *NotInPoolError) Error() string {
	if e.Pool == "" {
		return fmt.Sprintf("address %s is not in any pool of the cloud-config", e.Addr)
	}
	return fmt.Sprintf("address %s is not in pool %q", e.Addr, e.Pool)
}

// InUseError is returned when a requested address belongs to another Service that does not
// share it with this one.
type InUseError struct {
	Addr   netip.Addr
	Holder string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("address %s is already assigned to %s", e.Addr, e.Holder)
}

// PortConflictError is returned when Services with the same sharing key would share an
// address but both use the same port and protocol.
type PortConflictError struct {
	Addr   netip.Addr
	Holder string
	Port   Port
}

func (e *PortConflictError) Error() string {
	return fmt.Sprintf("cannot share address %s: %s already uses port %s", e.Addr, e.Holder, e.Port)
}

// SharedAddressError is returned when a request asks for an address that differs from the
// one its sharing key already holds.
type SharedAddressError struct {
	SharingKey string
	Want       netip.Addr
	Shared     netip.Addr
}

func (e *SharedAddressError) Error() string {
	return fmt.Sprintf("address %s was requested, but Services with sharing key %q already use %s", e.Want, e.SharingKey, e.Shared)
}

// InvalidRequestError is returned for a request that contradicts itself, such as two
// addresses of one family or an address of a family the request does not ask for.
type InvalidRequestError struct {
	Reason string
}

func (e *InvalidRequestError) Error() string { return "invalid request: " + e.Reason }

// DuplicateError reports, from Restore, an address that two Services claim without being
// allowed to share it. Holder keeps the address; Service loses it.
type DuplicateError struct {
	Addr    netip.Addr
	Service string
	Holder  string
	Reason  error
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%s claims address %s, which %s already holds: %v", e.Service, e.Addr, e.Holder, e.Reason)
}

func (e *DuplicateError) Unwrap() error { return e.Reason }
