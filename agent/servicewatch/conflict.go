package servicewatch

import (
	"net"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
)

// ReasonDuplicateAddress is the reason of the Warning event on a Service when another
// host on the segment claims an address this node announces for it. AddressConflict, the
// ccm's, names two Services asking for one address; this names two hosts answering for it.
const ReasonDuplicateAddress = "DuplicateAddress"

// DuplicateAddress records a Warning event on the Services of a, which this node announces
// at ours on interface ifname, when the host at mac claims it too: clients reach either
// host, whichever spoke last. Nothing moves because of it; the event says what to look for.
func (w *Watcher) DuplicateAddress(a desired.Address, c l2.Claim, ifname string, ours net.HardwareAddr) {
	w.eventOn(a.Services, v1.EventTypeWarning, ReasonDuplicateAddress,
		"Another host claims %s: %s %s on %s, where node %s announces it at %s; clients may reach either. Find the host with hardware address %s and remove the address from it, or take the address out of pool %s",
		c.Addr, c.MAC, c.Kind.Describe(c.Addr.Is6()), ifname, w.node, ours, c.MAC, a.Pool.Name)
}
