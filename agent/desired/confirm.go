package desired

import (
	"net/netip"
	"slices"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Digest returns the digest of the addresses, as the agent's replies carry it and as the
// ccm's requests carry the digest of what it expects.
func Digest(addrs []Address) probe.Digest {
	var d probe.Digest
	for _, a := range addrs {
		d = d.With(a.Addr)
	}
	return d
}

// Confirmed returns the addresses of own that the ccm's duty list confirms, in own's
// order: what an agent that cannot trust its own view announces. It never adds one: an
// address the ccm gives the node but the node's cache does not know of has no pool or
// Services known here, and waits for the cache.
func Confirmed(own []Address, duty []netip.Addr) []Address {
	confirmed := make(map[netip.Addr]bool, len(duty))
	for _, a := range duty {
		confirmed[a.Unmap()] = true
	}
	return slices.DeleteFunc(slices.Clone(own), func(a Address) bool { return !confirmed[a.Addr] })
}
