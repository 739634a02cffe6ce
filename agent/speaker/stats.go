package speaker

import (
	"net/netip"
	"time"

	"k8s.io/component-base/metrics"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Stats is what a Speaker has done, per family (indexed by iprange.Family).
type Stats struct {
	// Owned is the number of addresses answered for, per family.
	Owned [2]int
	// Unplaced is the number of addresses the node should announce but has no interface for.
	Unplaced int
	// Packets counts requests, answers, announcements and their refreshes, per family,
	// since the start.
	Packets [2]l2.Stats
	// Resubscriptions counts the netlink subscriptions renewed after they failed.
	Resubscriptions uint64
	// Claims counts the claims of owned addresses by other hardware addresses, per family
	// and outcome.
	Claims [2][claimOutcomes]uint64
	// Conflicted is the number of addresses with a conflict reported in the last minute.
	Conflicted int
}

// Stats returns what the Speaker has done so far.
func (s *Speaker) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	st.Unplaced = len(s.unplaced)
	st.Resubscriptions = s.resubscriptions.Load()
	st.Claims, st.Conflicted = s.conflicts.stats(time.Now())
	owned := [2]map[netip.Addr]bool{{}, {}}
	st.Packets = s.retired
	for k, r := range s.responders {
		f := k.family
		addStats(&st.Packets[f], r.Stats())
		for _, a := range r.owned {
			owned[f][a] = true
		}
	}
	st.Owned = [2]int{len(owned[iprange.IPv4]), len(owned[iprange.IPv6])}
	return st
}

// addStats adds the counts of b to a.
func addStats(a *l2.Stats, b l2.Stats) {
	a.Read += b.Read
	a.Requests += b.Requests
	a.Answered += b.Answered
	a.Gratuitous += b.Gratuitous
	a.Refreshes += b.Refreshes
	a.Claims += b.Claims
}

// Collector exposes a Speaker's Stats as metrics, read when scraped.
type Collector struct {
	metrics.BaseStableCollector
	s *Speaker
}

// NewCollector returns a Collector of s's Stats, to register with a component-base
// registry.
func NewCollector(s *Speaker) *Collector { return &Collector{s: s} }

var (
	descRead = metrics.NewDesc("baremetal_agent_frames_read_total",
		"Frames read from the ARP and NDP sockets, per family: the requests that passed the kernel's filter, for an owned address or not, and the replies and announcements of the pools' addresses by other hosts (others stay in the kernel).",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descRequests = metrics.NewDesc("baremetal_agent_requests_total",
		"ARP requests and neighbour solicitations received for an owned address, per family.",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descAnswered = metrics.NewDesc("baremetal_agent_replies_total",
		"ARP replies and solicited neighbour advertisements sent, per family.",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descGratuitous = metrics.NewDesc("baremetal_agent_announcements_total",
		"Gratuitous ARP requests and unsolicited neighbour advertisements sent on gaining an address, per family; their periodic refreshes are counted in baremetal_agent_announcement_refreshes_total.",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descRefreshes = metrics.NewDesc("baremetal_agent_announcement_refreshes_total",
		"Gratuitous ARP requests and unsolicited neighbour advertisements sent again, once per announcements.refreshInterval, for addresses owned for a while, per family.",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descOwned = metrics.NewDesc("baremetal_agent_owned_addresses",
		"Addresses this node answers for, per family.",
		[]string{"family"}, nil, metrics.ALPHA, "")
	descUnplaced = metrics.NewDesc("baremetal_agent_addresses_without_interface",
		"Addresses this node should announce but has no up interface for.",
		nil, nil, metrics.ALPHA, "")
	descClaims = metrics.NewDesc("baremetal_agent_address_claims_total",
		"Frames in which another host claimed an address this node announces (an ARP reply or announcement, a request or solicitation from the address, a neighbour advertisement, duplicate address detection), per family and outcome: Reported as a conflict (event DuplicateAddress), Repeated within a minute of its report, Takeover or Moved (the address changing node), OwnInterface (another interface of this node), Limited (too many at once).",
		[]string{"family", "outcome"}, nil, metrics.ALPHA, "")
	descConflicted = metrics.NewDesc("baremetal_agent_conflicted_addresses",
		"Addresses this node announces that another host claimed in the last minute: clients may reach either host.",
		nil, nil, metrics.ALPHA, "")
	descResubscriptions = metrics.NewDesc("baremetal_agent_netlink_resubscriptions_total",
		"Netlink subscriptions to link and address changes renewed after they failed (ENOBUFS on a busy node).",
		nil, nil, metrics.ALPHA, "")
)

// DescribeWithStability implements metrics.StableCollector.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{descRead, descRequests, descAnswered, descGratuitous, descRefreshes, descOwned, descUnplaced, descResubscriptions, descClaims, descConflicted} {
		ch <- d
	}
}

// CollectWithStability implements metrics.StableCollector.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	st := c.s.Stats()
	for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
		p, name := st.Packets[f], f.String()
		ch <- metrics.NewLazyConstMetric(descRead, metrics.CounterValue, float64(p.Read), name)
		ch <- metrics.NewLazyConstMetric(descRequests, metrics.CounterValue, float64(p.Requests), name)
		ch <- metrics.NewLazyConstMetric(descAnswered, metrics.CounterValue, float64(p.Answered), name)
		ch <- metrics.NewLazyConstMetric(descGratuitous, metrics.CounterValue, float64(p.Gratuitous), name)
		ch <- metrics.NewLazyConstMetric(descRefreshes, metrics.CounterValue, float64(p.Refreshes), name)
		ch <- metrics.NewLazyConstMetric(descOwned, metrics.GaugeValue, float64(st.Owned[f]), name)
		for o := range claimOutcomes {
			ch <- metrics.NewLazyConstMetric(descClaims, metrics.CounterValue, float64(st.Claims[f][o]), name, o.String())
		}
	}
	ch <- metrics.NewLazyConstMetric(descConflicted, metrics.GaugeValue, float64(st.Conflicted))
	ch <- metrics.NewLazyConstMetric(descUnplaced, metrics.GaugeValue, float64(st.Unplaced))
	ch <- metrics.NewLazyConstMetric(descResubscriptions, metrics.CounterValue, float64(st.Resubscriptions))
}
