// Package ipam allocates Service addresses from the pools of the cloud-config.
//
// It is pure Go and makes no API calls: the caller says which Service wants which
// families, pool, exact addresses and sharing key, and gets addresses or a typed error
// saying why not. State grows with the addresses handed out, never with the size of a
// pool, so IPv6 pools of any size cost nothing until they are used.
package ipam

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Port is a port a Service exposes. Services that share an address must not repeat one.
type Port struct {
	Protocol string
	Port     int32
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Port, p.Protocol) }

// Request is what one Service asks for. Assigning the same Request again changes nothing.
type Request struct {
	// Service identifies the holder, as namespace/name.
	Service string
	// Namespace and Labels are matched against the pools' namespaces and serviceSelector.
	Namespace string
	Labels    labels.Set
	// Pool restricts the request to one pool; empty lets the allocator choose.
	Pool string
	// Families lists the families wanted, one address each, in the order returned.
	Families []iprange.Family
	// Addresses are exact addresses wanted, at most one per family in Families.
	// A family without one gets the lowest free address.
	Addresses []netip.Addr
	// SharingKey lets Services with the same key share an address when their Ports
	// do not overlap. Empty means the address is the Service's alone.
	SharingKey string
	Ports      []Port
}

// Assignment is a Service's addresses as recorded elsewhere (in the Service status), from
// which Restore rebuilds the allocator, with what the pool rules read of its request.
type Assignment struct {
	Service    string
	Namespace  string
	Labels     labels.Set
	Pool       string
	Addresses  []netip.Addr
	SharingKey string
	Ports      []Port
}

// Stats are the figures of one family of one pool. Size and Free are exact for any pool.
type Stats struct {
	Pool   string
	Family iprange.Family
	Size   *big.Int
	Used   int
	Free   *big.Int
}

// Allocator hands out addresses from pools. It is safe for concurrent use.
type Allocator struct {
	mu sync.Mutex
	state
	// poolsVersion counts the calls of SetPools, for Restore to see that the pools changed
	// while it built a state apart.
	poolsVersion uint64
}

// state is everything the allocator holds, so that Restore can build one apart and swap it
// in whole.
type state struct {
	cfg      []config.Pool
	pools    []*pool // in config order, which is the auto-assign order
	byName   map[string]*pool
	index    []*span // every span, sorted by first address, to find an address's pool
	owners   map[addrKey]*holder
	sharers  map[netip.Addr][]*holder // holders of a shared address besides its owner
	services map[string]*holder
	groups   map[groupKey]netip.Addr // the address each sharing key uses, per family
}

type pool struct {
	cfg   *config.Pool
	spans [2]*span // by family; nil when the pool has none of that family
}

// holder is one Service's claim. It is replaced, never changed, when the claim changes.
type holder struct {
	service string
	addrs   [2]netip.Addr // by family; the zero Addr when none
	share   *sharing      // nil for a Service without a sharing key
}

// sharing is kept apart from holder because most Services do not share, and holder is
// the per-address memory cost.
type sharing struct {
	key   string
	ports []Port
}

// addrKey is an address as a map key: 16 bytes where netip.Addr takes 24, and the map of
// taken addresses holds one per address handed out. IPv4 addresses are stored mapped,
// which cannot collide: the allocator never holds an IPv4-mapped IPv6 address.
type addrKey [16]byte

func keyOf(a netip.Addr) addrKey { return a.As16() }

type groupKey struct {
	key    string
	family iprange.Family
}

// New returns an empty allocator over pools, which must have passed config validation
// (no overlaps).
func New(pools []config.Pool) *Allocator {
	// A copy: the allocator's pools point into it, and the caller's slice may change.
	a := &Allocator{state: state{cfg: slices.Clone(pools)}}
	a.reset()
	return a
}

func (a *Allocator) reset() {
	a.pools = make([]*pool, 0, len(a.cfg))
	a.byName = make(map[string]*pool, len(a.cfg))
	a.index = nil
	for i := range a.cfg {
		cfg := &a.cfg[i]
		p := &pool{cfg: cfg}
		var byFamily [2][]iprange.Range
		for _, r := range cfg.Ranges {
			f := iprange.FamilyOf(r.First)
			byFamily[f] = append(byFamily[f], r)
		}
		for f, ranges := range byFamily {
			if len(ranges) > 0 {
				p.spans[f] = newSpan(p, ranges, cfg.AvoidBuggyIPs)
				a.index = append(a.index, p.spans[f])
			}
		}
		a.pools = append(a.pools, p)
		a.byName[cfg.Name] = p
	}
	slices.SortFunc(a.index, func(x, y *span) int { return x.ranges[0].First.Compare(y.ranges[0].First) })
	a.owners = make(map[addrKey]*holder)
	a.sharers = make(map[netip.Addr][]*holder)
	a.services = make(map[string]*holder)
	a.groups = make(map[groupKey]netip.Addr)
}

// spanOf returns the span holding addr, or nil when addr is in no pool.
func (a *Allocator) spanOf(addr netip.Addr) *span {
	// Spans of different pools may interleave, so look at every span whose first address
	// is not after addr, nearest first; pools are few.
	i, _ := slices.BinarySearchFunc(a.index, addr, func(s *span, addr netip.Addr) int {
		if c := s.ranges[0].First.Compare(addr); c != 0 {
			return c
		}
		return -1
	})
	for i--; i >= 0; i-- {
		if s := a.index[i]; s.contains(addr) {
			return s
		}
	}
	return nil
}
