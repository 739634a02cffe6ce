// Package speaker makes a node announce the addresses it owns: it chooses the interfaces
// for each address, keeps one l2.Responder per interface and family, announces every
// address it gains and, once in a while, every address it keeps, and follows interfaces as
// they come, go, and change.
package speaker

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/desired"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// DefaultAnnouncements are the times after gaining an address at which it is announced:
// a few, over about two seconds, so that a lost packet or a switch still learning the
// port costs nothing.
var DefaultAnnouncements = []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second}

// resync is how often links are read again even when netlink reports nothing, which also
// retries interfaces that could not be listened on.
const resync = 10 * time.Second

// listenNDPTimeout bounds the wait for a tentative link-local address.
const listenNDPTimeout = 3 * time.Second

// Options configure a Speaker.
type Options struct {
	// Announcements are the delays after gaining an address at which it is announced;
	// DefaultAnnouncements if nil.
	Announcements []time.Duration
	// Unplaced, if set, is called once each time an address becomes one the node should
	// announce but has no interface for.
	Unplaced func(desired.Address)
	// LinkLost, if set, is called with the name of an Ethernet interface that was up and
	// is down or gone now: the node may have been cut off from the network.
	LinkLost func(name string)
	// Unable, if set, is called with what the node cannot announce (see Unable) whenever
	// it changes with the links or the pools.
	Unable func([]probe.Unable)
	// Gained, if set, is called with the addresses the node begins to announce on an
	// interface, as it begins. It must not block or keep the slice.
	Gained func([]netip.Addr)
	// Conflict, if set, is called when another host claims an address the node announces
	// (see Conflict), at most once a minute for one host and address.
	Conflict func(Conflict)
}

type respKey struct {
	link   string
	family iprange.Family
}

// A Speaker announces a set of addresses. Apply sets the addresses; Run follows the links.
type Speaker struct {
	opts Options
	done chan struct{}
	// What Run reads the links with, and how often; tests replace them.
	subscribe subscribeFunc
	readLinks func() ([]Link, error)
	resync    time.Duration
	// resubscriptions counts the netlink subscriptions renewed.
	resubscriptions atomic.Uint64

	mu         sync.Mutex
	links      []Link
	haveLinks  bool
	want       []desired.Address
	responders map[respKey]*responder
	unplaced   map[netip.Addr]bool
	retired    [2]l2.Stats // counts of closed responders, per family
	pools      []config.Pool
	unable     []probe.Unable // as last told
	// refreshes says when each announced address is announced again; refreshWake wakes
	// the loop that sends them when one comes due sooner. None while draining.
	refreshes   *schedule
	refreshWake chan struct{}
	draining    bool
	// ownMACs are the hardware addresses of the node's links, by string(mac).
	ownMACs   atomic.Pointer[map[string]bool]
	conflicts *conflicts
}

type responder struct {
	*l2.Responder
	link  Link
	owned []netip.Addr // as last set, for logging what is lost

	mu sync.Mutex
	// lingering are the owned addresses that moved away while this node drains: answered,
	// never announced.
	lingering map[netip.Addr]bool
	// gained says when each owned address was gained.
	gained map[netip.Addr]time.Time
}

// announces reports whether r still announces addr: it owns it, and it has not moved
// away.
func (r *responder) announces(addr netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Owns(addr) && !r.lingering[addr]
}

// New returns a Speaker that announces nothing until Apply and Run are called.
func New(opts Options) *Speaker {
	if opts.Announcements == nil {
		opts.Announcements = DefaultAnnouncements
	}
	return &Speaker{
		opts:        opts,
		done:        make(chan struct{}),
		subscribe:   subscribeNetlink,
		readLinks:   readLinks,
		resync:      resync,
		responders:  map[respKey]*responder{},
		unplaced:    map[netip.Addr]bool{},
		refreshes:   newSchedule(time.Now()),
		refreshWake: make(chan struct{}, 1),
		conflicts:   newConflicts(),
	}
}

// Apply makes addrs the addresses the node announces, at once on the links known; the
// ones gained are announced. Lost addresses are no longer answered for when Apply returns.
func (s *Speaker) Apply(addrs []desired.Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = slices.Clone(addrs)
	s.reconcile()
}

// Run reads the links, keeps them up to date from netlink, and announces until ctx ends;
// then it stops answering on every link and returns. A netlink subscription that fails
// (ENOBUFS on a busy node) is renewed with a backoff; meanwhile the links are read every
// resync.
func (s *Speaker) Run(ctx context.Context) error {
	defer s.stop()
	onError := func(err error) { klog.ErrorS(err, "Netlink subscription failed") }
	sub, err := subscribe(ctx, s.subscribe, onError)
	if err != nil {
		return err
	}
	// Stopped before the responders close, so that no refresh goes to a closed socket.
	refreshing := make(chan struct{})
	go func() {
		defer close(refreshing)
		s.refreshLoop(ctx)
	}()
	defer func() { <-refreshing }()
	defer func() {
		if sub != nil {
			sub.close()
		}
	}()
	s.refresh()
	tick := time.NewTicker(s.resync)
	defer tick.Stop()
	renew := backoff{min: resubscribeMin, max: resubscribeMax, healthy: resubscribeHealthy}
	var retry <-chan time.Time // set while there is no subscription
	for {
		// Without a subscription both channels are nil, and never ready.
		var linkUpdates <-chan netlink.LinkUpdate
		var addrUpdates <-chan netlink.AddrUpdate
		if sub != nil {
			linkUpdates, addrUpdates = sub.links, sub.addrs
		}
		open := true
		select {
		case <-ctx.Done():
			return nil
		case _, open = <-linkUpdates:
		case _, open = <-addrUpdates:
		case <-tick.C:
		case <-retry:
			retry = nil
			if sub, err = subscribe(ctx, s.subscribe, onError); err != nil {
				wait := renew.failed(0)
				klog.ErrorS(err, "Cannot renew the netlink subscription; links are read every resync", "retryIn", wait)
				retry = time.After(wait)
				continue
			}
			klog.InfoS("Renewed the netlink subscription")
			s.resubscriptions.Add(1)
		}
		// One read of the links for a burst of updates.
		for drained := !open; !drained; {
			select {
			case _, open = <-linkUpdates:
				drained = !open
			case _, open = <-addrUpdates:
				drained = !open
			default:
				drained = true
			}
		}
		if !open {
			// Updates were lost with the subscription: the read below catches up.
			wait := renew.failed(time.Since(sub.since))
			klog.InfoS("Netlink subscription closed; renewing it, and reading the links every resync meanwhile", "lasted", time.Since(sub.since).Round(time.Millisecond), "retryIn", wait, "resync", s.resync)
			sub.close()
			sub, retry = nil, time.After(wait)
		}
		s.refresh()
	}
}

func (s *Speaker) refresh() {
	links, err := s.readLinks()
	if err != nil {
		klog.ErrorS(err, "Cannot read the network interfaces")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tellUnable()
	if s.opts.LinkLost != nil {
		for _, was := range s.links {
			i := slices.IndexFunc(links, func(l Link) bool { return l.Name == was.Name })
			if was.Up && !was.Loopback && len(was.MAC) == 6 && (i < 0 || !links[i].Up) {
				s.opts.LinkLost(was.Name)
			}
		}
	}
	s.links, s.haveLinks = links, true
	macs := make(map[string]bool, len(links))
	for _, l := range links {
		macs[string(l.MAC)] = true
	}
	s.ownMACs.Store(&macs)
	s.reconcile()
}

// SetPools sets the pools whose announceability Options.Unable reports, and whose
// addresses' claims by other hosts the responders read.
func (s *Speaker) SetPools(pools []config.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = pools
	s.tellUnable()
	ranges := config.RangesOf(pools)
	for k, r := range s.responders {
		if err := r.SetRanges(ranges); err != nil {
			klog.ErrorS(err, "Cannot filter the claims of the pools' addresses; another host's claims may go unnoticed", "interface", k.link)
		}
	}
}

// tellUnable tells Options.Unable what the node cannot announce, if it changed. s.mu is
// held: the calls come in the order of the changes.
func (s *Speaker) tellUnable() {
	if s.opts.Unable == nil || !s.haveLinks {
		return
	}
	u := Unable(s.pools, s.links)
	if s.unable != nil && slices.Equal(u, s.unable) {
		return
	}
	if len(u) > 0 || len(s.unable) > 0 {
		klog.InfoS("Pools and families this node cannot announce", "unable", u)
	}
	s.unable = append([]probe.Unable{}, u...)
	s.opts.Unable(u)
}

// Ready reports whether the links have been read, so that the speaker answers for what
// it is given.
func (s *Speaker) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.haveLinks
}

func (s *Speaker) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.done)
	for k := range s.responders {
		s.closeResponder(k)
	}
}

// reconcile brings the responders in line with s.want and s.links. s.mu is held.
func (s *Speaker) reconcile() {
	if !s.haveLinks {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	// Refreshes of a gained address wait for the end of its announcements.
	var burst time.Duration
	if len(s.opts.Announcements) > 0 {
		burst = slices.Max(s.opts.Announcements)
	}
	quiet := time.Now().Add(burst)
	byName := map[string]Link{}
	for _, l := range s.links {
		byName[l.Name] = l
	}
	perResponder := map[respKey][]netip.Addr{}
	lingering := map[netip.Addr]bool{}
	unplaced := map[netip.Addr]bool{}
	for _, a := range s.want {
		if a.Lingering {
			lingering[a.Addr] = true
		}
		names := Choose(a.Addr, a.Pool.Interfaces, s.links)
		if len(names) == 0 {
			unplaced[a.Addr] = true
			if !s.unplaced[a.Addr] {
				klog.InfoS("No interface to announce an address on", "address", a.Addr, "pool", a.Pool.Name, "poolInterfaces", a.Pool.Interfaces, "services", a.Services)
				if s.opts.Unplaced != nil {
					s.opts.Unplaced(a)
				}
			}
			continue
		}
		for _, n := range names {
			k := respKey{n, iprange.FamilyOf(a.Addr)}
			perResponder[k] = append(perResponder[k], a.Addr)
		}
	}
	s.unplaced = unplaced

	for k, r := range s.responders {
		l, ok := byName[k.link]
		if _, wanted := perResponder[k]; !wanted || !ok || l.Index != r.link.Index || !bytes.Equal(l.MAC, r.link.MAC) {
			s.closeResponder(k)
		}
	}
	for k, addrs := range perResponder {
		r := s.responders[k]
		if r == nil {
			var err error
			if r, err = s.listen(k, byName[k.link]); err != nil {
				klog.ErrorS(err, "Cannot answer for addresses on an interface; retrying on the next change or resync", "interface", k.link, "addresses", addrs)
				continue
			}
		}
		r.mu.Lock()
		for _, a := range addrs {
			if lingering[a] && !r.lingering[a] {
				klog.V(2).InfoS("Address moved away; answering for it, no longer announcing it, until this agent exits", "address", a, "interface", k.link)
			}
		}
		r.lingering = lingering
		r.mu.Unlock()
		gained, err := r.Set(addrs)
		r.noteGained(gained, addrs)
		if err != nil {
			klog.ErrorS(err, "Cannot join the multicast groups of addresses", "interface", k.link)
		}
		isGained := make(map[netip.Addr]bool, len(gained))
		var announce []netip.Addr
		for _, a := range gained {
			isGained[a] = true
			if lingering[a] {
				continue
			}
			klog.V(2).InfoS("Announcing address", "address", a, "interface", k.link)
			announce = append(announce, a)
		}
		if len(announce) > 0 {
			if s.opts.Gained != nil {
				s.opts.Gained(announce) // before announce, which reuses the slice
			}
			go s.announce(r, announce)
		}
		s.scheduleRefreshes(k.link, addrs, isGained, lingering, quiet)
		for _, a := range r.owned {
			if !slices.Contains(addrs, a) {
				klog.V(2).InfoS("Stopped announcing address", "address", a, "interface", k.link)
				s.refreshes.drop(target{k.link, a})
			}
		}
		r.owned = addrs
	}
}

func (s *Speaker) listen(k respKey, l Link) (*responder, error) {
	ifi := &net.Interface{Index: l.Index, Name: l.Name, HardwareAddr: l.MAC, MTU: l.MTU}
	var resp *responder
	cfg := l2.Config{
		Ranges: config.RangesOf(s.pools),
		// Set below, before Serve reads a frame.
		Claims: func(c l2.Claim) { s.claimed(k, resp, c) },
	}
	var r *l2.Responder
	var err error
	if k.family == iprange.IPv6 {
		ctx, cancel := context.WithTimeout(context.Background(), listenNDPTimeout)
		r, err = l2.ListenNDP(ctx, ifi, cfg)
		cancel()
	} else {
		r, err = l2.ListenARP(ifi, cfg)
	}
	if err != nil {
		return nil, err
	}
	resp = &responder{Responder: r, link: l, gained: map[netip.Addr]time.Time{}}
	go func() {
		if err := r.Serve(); err != nil {
			klog.ErrorS(err, "Stopped answering on an interface", "interface", l.Name)
		}
	}()
	s.responders[k] = resp
	return resp, nil
}

func (s *Speaker) closeResponder(k respKey) {
	r := s.responders[k]
	delete(s.responders, k)
	for _, a := range r.owned {
		klog.V(2).InfoS("Stopped announcing address", "address", a, "interface", k.link)
		s.refreshes.drop(target{k.link, a})
	}
	if err := r.Close(); err != nil {
		klog.ErrorS(err, "Closing a responder", "interface", k.link)
	}
	addStats(&s.retired[k.family], r.Stats())
}

// noteGained records when the addresses of gained were gained, and forgets those no
// longer in owned.
func (r *responder) noteGained(gained, owned []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, a := range gained {
		r.gained[a] = now
	}
	if len(r.gained) > len(owned) {
		keep := make(map[netip.Addr]bool, len(owned))
		for _, a := range owned {
			keep[a] = true
		}
		for a := range r.gained {
			if !keep[a] {
				delete(r.gained, a)
			}
		}
	}
}

// announce sends the announcements of addresses gained together, of each as long as r
// still owns it. One goroutine and one timer for all of them, so that a takeover of
// thousands of addresses costs one wake-up per round of announcements, not thousands.
func (s *Speaker) announce(r *responder, addrs []netip.Addr) {
	start := time.Now()
	for _, at := range s.opts.Announcements {
		if wait := time.Until(start.Add(at)); wait > 0 {
			select {
			case <-s.done:
				return
			case <-time.After(wait):
			}
		}
		kept := addrs[:0]
		for _, a := range addrs {
			if !r.announces(a) {
				continue
			}
			kept = append(kept, a)
			if err := r.Announce(a); err != nil {
				klog.ErrorS(err, "Cannot announce an address", "address", a)
			}
		}
		if addrs = kept; len(addrs) == 0 {
			return
		}
	}
}
