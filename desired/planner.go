package desired

import (
	"net/netip"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// planners returns, for every address of the requests that are ours and have a plan, the
// request whose plan decides who announces it: of the Services that list the address, the
// first by namespace and name. A Service without a plan yet (just created, sharing an
// address) decides nothing. Services sharing an address carry one plan, as the ccm writes it to
// all of them; two different plans (an annotation edited by hand, or a stale one) must
// still give the address one announcer, and every agent and the ccm pick the same.
func planners(requests []*annotation.Request) map[netip.Addr]*annotation.Request {
	out := make(map[netip.Addr]*annotation.Request, len(requests))
	for _, r := range requests {
		if !r.Ours() || r.Announcer == "" {
			continue
		}
		for _, addr := range r.Ingress {
			if p, ok := out[addr]; !ok || r.Service < p.Service {
				out[addr] = r
			}
		}
	}
	return out
}
