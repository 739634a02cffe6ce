package speaker

import (
	"net/netip"

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
}

// Stats returns what the Speaker has done so far.
func (s *Speaker) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	st.Unplaced = len(s.unplaced)
	st.Resubscriptions = s.resubscriptions.Load()
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
		"Frames read from the ARP and NDP sockets, per family: the requests that passed the kernel's filter (replies and announcements stay in the kernel), for an owned address or not.",
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
	descResubscriptions = metrics.NewDesc("baremetal_agent_netlink_resubscriptions_total",
		"Netlink subscriptions to link and address changes renewed after they failed (ENOBUFS on a busy node).",
		nil, nil, metrics.ALPHA, "")
)

// DescribeWithStability implements metrics.StableCollector.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{descRead, descRequests, descAnswered, descGratuitous, descRefreshes, descOwned, descUnplaced, descResubscriptions} {
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
	}
	ch <- metrics.NewLazyConstMetric(descUnplaced, metrics.GaugeValue, float64(st.Unplaced))
	ch <- metrics.NewLazyConstMetric(descResubscriptions, metrics.CounterValue, float64(st.Resubscriptions))
}
