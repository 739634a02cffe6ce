package app

import (
	"net"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/speaker"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/wirecheck"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
)

// backer gives the wire check the addresses this node backs, each with the interface
// the node would announce it on and its announcer's own address there.
type backer struct {
	speaker *speaker.Speaker
	nodes   listersv1.NodeLister
	check   *wirecheck.Check
}

// Back implements servicewatch.Backer.
func (b *backer) Back(backed []desired.Backed) {
	targets := make([]wirecheck.Target, 0, len(backed))
	for _, bk := range backed {
		links := b.speaker.Links(bk.Addr, bk.Pool.Interfaces)
		if len(links) == 0 {
			continue
		}
		l := links[0]
		targets = append(targets, wirecheck.Target{
			Backed:    bk,
			Interface: net.Interface{Index: l.Index, Name: l.Name, HardwareAddr: l.MAC, MTU: l.MTU},
			Control:   b.control(bk.Announcer, bk.Addr.Is6(), l.Subnets),
		})
	}
	b.check.Set(targets)
}

// control returns node's InternalIP of the family of an IPv6 address or not, when it lies
// in one of subnets: its kernel answers for it on the segment.
func (b *backer) control(node string, ipv6 bool, subnets []netip.Prefix) netip.Addr {
	n, err := b.nodes.Get(node)
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if a.Type != v1.NodeInternalIP || err != nil || ip.Is6() != ipv6 {
			continue
		}
		if slices.ContainsFunc(subnets, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return ip
		}
	}
	return netip.Addr{}
}
