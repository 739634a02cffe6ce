package desired

import (
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// Backed is an address another node announces and this node would take over first: the
// node checks on the wire that the announcer answers for it.
type Backed struct {
	// Addr is the address.
	Addr netip.Addr
	// Pool is the pool the address lies in.
	Pool *config.Pool
	// Announcer is the node that announces it now.
	Announcer string
	// Services are the Services ("namespace/name") that hold the address, sorted.
	Services []string
}

// BackedOf returns the addresses node backs, sorted: those whose announcer is another
// node and of whose plan node is the first after the announcer that is not down, and that
// node could announce (inside a pool whose nodeSelector selects it). requests, cfg,
// nodeLabels and down are as ComputeOf takes them.
func BackedOf(node string, nodeLabels labels.Set, requests []*annotation.Request, cfg *config.Config, down Down) []Backed {
	byAddr := map[netip.Addr]*Backed{}
	planner := planners(requests)
	for _, r := range requests {
		if !r.Ours() || node == "" {
			continue
		}
		for _, addr := range r.Ingress {
			p := r
			if q := planner[addr]; q != nil {
				p = q
			}
			announcer, next := firstTwo(p.Plan(), down)
			if next != node || announcer == node {
				continue
			}
			pool, reason := admit(addr, cfg, nodeLabels)
			if reason != "" {
				continue
			}
			b := byAddr[addr]
			if b == nil {
				b = &Backed{Addr: addr, Pool: pool, Announcer: announcer}
				byAddr[addr] = b
			}
			if !slices.Contains(b.Services, r.Service) {
				b.Services = append(b.Services, r.Service)
			}
		}
	}
	out := make([]Backed, 0, len(byAddr))
	for _, b := range byAddr {
		slices.Sort(b.Services)
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Backed) int { return a.Addr.Compare(b.Addr) })
	return out
}

// firstTwo returns the first two nodes of plan that are not down: the announcer, and
// the node that would take over from it; "" for each that is missing.
func firstTwo(plan []string, down Down) (announcer, next string) {
	for _, n := range plan {
		if down(n) {
			continue
		}
		if announcer == "" {
			announcer = n
			continue
		}
		return announcer, n
	}
	return announcer, ""
}
