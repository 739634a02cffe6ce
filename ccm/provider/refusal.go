package provider

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
)

// refusalReason returns the event reason, and metric label, for an allocation error.
func refusalReason(err error) string {
	switch {
	case errors.As(err, new(*ipam.InUseError)), errors.As(err, new(*ipam.PortConflictError)), errors.As(err, new(*ipam.SharedAddressError)):
		return ReasonAddressInUse
	case errors.As(err, new(*ipam.ExhaustedError)):
		return ReasonPoolExhausted
	case errors.As(err, new(*ipam.NotInPoolError)):
		return ReasonAddressNotInPool
	case errors.As(err, new(*ipam.NotAllowedError)):
		return ReasonPoolNotAllowed
	case errors.As(err, new(*ipam.UnknownPoolError)):
		return ReasonUnknownPool
	case errors.As(err, new(*ipam.FamilyNotOfferedError)):
		return ReasonFamilyNotOffered
	default:
		return ReasonInvalidRequest
	}
}

// refusalMessage explains an allocation error to the Service's owner: what is wrong, what
// to change, and that the Service keeps what it had.
func refusalMessage(svc *v1.Service, err error) string {
	var hint string
	switch refusalReason(err) {
	case ReasonAddressInUse:
		hint = fmt.Sprintf("ask for another address, or give the Services the same %s key and different ports to share it", annotation.AllowSharedIP)
	case ReasonPoolExhausted:
		hint = "release an address or add addresses to the pool in the cloud-config"
	case ReasonAddressNotInPool:
		hint = "ask for an address inside a pool of the cloud-config"
	case ReasonPoolNotAllowed:
		hint = fmt.Sprintf("choose another pool with %s, or change the pool's namespaces or serviceSelector", annotation.Pool)
	case ReasonUnknownPool:
		hint = fmt.Sprintf("set %s to a pool of the cloud-config", annotation.Pool)
	case ReasonFamilyNotOffered:
		hint = "add such addresses to a pool, or change the Service's ipFamilies"
	}
	msg := err.Error()
	if hint != "" {
		msg += "; " + hint
	}
	if had := ingressOf(svc); len(had) > 0 {
		var s []string
		for _, a := range had {
			s = append(s, a.String())
		}
		msg += "; the Service keeps " + strings.Join(s, ", ")
	}
	return msg
}

// restoreRefusal explains why the restore did not give a Service back an address of its
// status, by the rule that refused it.
func restoreRefusal(e *ipam.NotRestoredError) string {
	var notInPool *ipam.NotInPoolError
	if errors.As(e.Reason, &notInPool) && notInPool.Pool == "" {
		return fmt.Sprintf("Address %s is in no pool of the cloud-config any more; this Service gets another address", e.Addr)
	}
	return fmt.Sprintf("Address %s is not kept: %v; this Service gets another address", e.Addr, e.Reason)
}
