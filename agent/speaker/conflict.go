package speaker

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// A Conflict is another host claiming an address this node announces, on the wire.
type Conflict struct {
	// Address is the address, as the node announces it.
	Address desired.Address
	// Claim is what the other host's frame said.
	Claim l2.Claim
	// Interface is where the frame came in, and MAC the node's address there.
	Interface string
	MAC       net.HardwareAddr
}

// ClaimOutcome is what became of a claim of an owned address by another hardware address.
type ClaimOutcome uint8

// The outcomes of a claim, as counted in Stats.Claims.
const (
	// Reported: a conflict, passed to Options.Conflict.
	Reported ClaimOutcome = iota
	// Repeated: a conflict reported already within conflictReportEvery.
	Repeated
	// Takeover: the node gained the address less than takeoverSettle ago; the claim is
	// the last word of the node it took the address from.
	Takeover
	// Moved: the address has moved to another node, which now announces it.
	Moved
	// OwnInterface: the hardware address is that of another interface of this node.
	OwnInterface
	// Limited: more claims waited for confirmation than maxPendingClaims.
	Limited
	claimOutcomes
)

var outcomeNames = [claimOutcomes]string{"Reported", "Repeated", "Takeover", "Moved", "OwnInterface", "Limited"}

// String returns the outcome's name, as in metrics.
func (o ClaimOutcome) String() string { return outcomeNames[o] }

const (
	// takeoverSettle is how long after gaining an address claims of it by others are the
	// takeover's: the node it took the address from sends its last announcements until it
	// learns of the move, within a second even on a busy node.
	takeoverSettle = 3 * time.Second
	// confirmAfter is how long a claim waits before it is reported: if this node is the
	// one losing the address, it learns so within it and the claim is the new announcer's.
	confirmAfter = 500 * time.Millisecond
	// conflictReportEvery is how often one host's claim of one address is reported while
	// it goes on.
	conflictReportEvery = time.Minute
	// maxPendingClaims bounds the claims waiting for confirmation, and maxConflicts the
	// conflicts remembered, whatever a host on the segment sends.
	maxPendingClaims = 256
	maxConflicts     = 4096
)

type claimKey struct {
	addr netip.Addr
	mac  [6]byte
}

// conflicts sorts the claims of owned addresses into conflicts and the rest. Its methods
// are safe for concurrent use.
type conflicts struct {
	mu       sync.Mutex
	pending  map[claimKey]bool
	reported map[claimKey]time.Time
	counts   [2][claimOutcomes]uint64 // per family
}

func newConflicts() *conflicts {
	return &conflicts{pending: map[claimKey]bool{}, reported: map[claimKey]time.Time{}}
}

// first says whether c should wait for confirmation, and counts it otherwise.
func (cs *conflicts) first(c l2.Claim, gained time.Time, lingering, ownMAC bool, now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := claimKey{c.Addr, [6]byte(c.MAC)}
	var o ClaimOutcome
	switch {
	case ownMAC:
		o = OwnInterface
	case lingering:
		o = Moved
	case now.Sub(gained) < takeoverSettle:
		o = Takeover
	case now.Sub(cs.reported[k]) < conflictReportEvery:
		o = Repeated
	case cs.pending[k]:
		return false
	case len(cs.pending) >= maxPendingClaims:
		o = Limited
	default:
		cs.pending[k] = true
		return true
	}
	cs.counts[iprange.FamilyOf(c.Addr)][o]++
	return false
}

// confirm ends the wait of c: a conflict when the node still announces the address,
// as it did when the claim came; it returns whether to report it.
func (cs *conflicts) confirm(c l2.Claim, stillOurs bool, now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := claimKey{c.Addr, [6]byte(c.MAC)}
	delete(cs.pending, k)
	o := Moved
	if stillOurs {
		o = Reported
		for key, at := range cs.reported {
			if now.Sub(at) >= conflictReportEvery {
				delete(cs.reported, key)
			}
		}
		if len(cs.reported) >= maxConflicts {
			o = Limited
		} else {
			cs.reported[k] = now
		}
	}
	cs.counts[iprange.FamilyOf(c.Addr)][o]++
	return o == Reported
}

// stats returns the counts of outcomes per family and the addresses with a conflict
// reported within conflictReportEvery.
func (cs *conflicts) stats(now time.Time) (counts [2][claimOutcomes]uint64, conflicted int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	addrs := map[netip.Addr]bool{}
	for k, at := range cs.reported {
		if now.Sub(at) < conflictReportEvery {
			addrs[k.addr] = true
		}
	}
	return cs.counts, len(addrs)
}

// claimed handles a claim read by the responder of k: it reports a conflict, after
// confirmAfter, unless the claim is part of a move of the address.
func (s *Speaker) claimed(k respKey, r *responder, c l2.Claim) {
	own := s.isOwnMAC(c.MAC)
	r.mu.Lock()
	gained, lingering := r.gained[c.Addr], r.lingering[c.Addr]
	r.mu.Unlock()
	if !s.conflicts.first(c, gained, lingering, own, time.Now()) {
		return
	}
	time.AfterFunc(confirmAfter, func() {
		r.mu.Lock()
		still := r.gained[c.Addr].Equal(gained) && !r.lingering[c.Addr]
		r.mu.Unlock()
		s.mu.Lock()
		i := slices.IndexFunc(s.want, func(w desired.Address) bool { return w.Addr == c.Addr })
		var a desired.Address
		if i >= 0 {
			a = s.want[i]
		}
		s.mu.Unlock()
		still = still && i >= 0 && !a.Lingering && r.Owns(c.Addr)
		if !s.conflicts.confirm(c, still, time.Now()) {
			return
		}
		conflict := Conflict{Address: a, Claim: c, Interface: k.link, MAC: r.link.MAC}
		klog.InfoS("Another host claims an address this node announces", "address", c.Addr, "mac", c.MAC, "claim", c.Kind, "interface", k.link, "ourMAC", r.link.MAC, "services", a.Services)
		if s.opts.Conflict != nil {
			s.opts.Conflict(conflict)
		}
	})
}

// isOwnMAC reports whether mac is the hardware address of one of the node's links. It
// reads them without s.mu, which a reconcile of thousands of addresses holds for a while:
// it is called from the loop that answers requests.
func (s *Speaker) isOwnMAC(mac net.HardwareAddr) bool {
	macs := s.ownMACs.Load()
	return macs != nil && (*macs)[string(mac)]
}
