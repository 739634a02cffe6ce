package wirecheck

import (
	"net"
	"net/netip"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/l2"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// checker returns the socket of k, opened on ifi if need be.
func (c *Check) checker(k checkerKey, ifi net.Interface) (*l2.Checker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch := c.checkers[k]; ch != nil {
		return ch, nil
	}
	ch, err := l2.ListenCheck(&ifi, k.family, c.filterRangesLocked())
	if err != nil {
		return nil, err
	}
	go func() {
		if err := ch.Serve(); err != nil {
			klog.ErrorS(err, "Stopped reading the answers of the wire check", "interface", ifi.Name)
		}
	}()
	c.checkers[k] = ch
	return ch, nil
}

// filterRangesLocked returns what the sockets let answers through for: the pools'
// addresses and the controls. c.mu is held.
func (c *Check) filterRangesLocked() []iprange.Range {
	out := append([]iprange.Range{}, c.ranges...)
	seen := map[netip.Addr]bool{}
	for _, e := range c.targets {
		if a := e.Control; a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, iprange.Range{First: a, Last: a})
		}
	}
	return out
}

// filterLocked brings the sockets in line with the targets: a new filter for each, and
// closed when no target uses it. c.mu is held.
func (c *Check) filterLocked() {
	used := map[checkerKey]bool{}
	for _, e := range c.targets {
		used[checkerKey{e.Interface.Index, string(e.Interface.HardwareAddr), iprange.FamilyOf(e.Addr)}] = true
	}
	ranges := c.filterRangesLocked()
	for k, ch := range c.checkers {
		if !used[k] {
			ch.Close()
			delete(c.checkers, k)
			continue
		}
		if err := ch.SetRanges(ranges); err != nil {
			klog.ErrorS(err, "Cannot filter the answers of the wire check")
		}
	}
}

func (c *Check) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, ch := range c.checkers {
		ch.Close()
		delete(c.checkers, k)
	}
}

// Stats is what a Check has found.
type Stats struct {
	// Rounds counts the rounds of each address, per family and outcome.
	Rounds [2][outcomes]uint64
	// Dark is the number of addresses that are dark now.
	Dark int
	// Checked is the number of addresses checked.
	Checked int
}

// Stats returns what the Check has found so far.
func (c *Check) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Rounds: c.counts, Dark: c.dark, Checked: len(c.targets)}
}

// Collector exposes a Check's Stats as metrics, read when scraped.
type Collector struct {
	metrics.BaseStableCollector
	c *Check
}

// NewCollector returns a Collector of c's Stats, to register with a component-base
// registry.
func NewCollector(c *Check) *Collector { return &Collector{c: c} }

var (
	descRounds = metrics.NewDesc("baremetal_agent_wire_checks_total",
		"Requests this node sent, as a client does, for the addresses it would take over first, per family and outcome: Answered; Unanswered while the announcer's node answered for its own address; Blind, neither answered (this node's link or the announcer's node cut off, which the probes tell).",
		[]string{"family", "outcome"}, nil, metrics.ALPHA, "")
	descDark = metrics.NewDesc("baremetal_agent_dark_addresses",
		"Addresses this node backs that went unanswered on the wire two rounds in a row while their announcer's node answered for its own address.",
		nil, nil, metrics.ALPHA, "")
	descChecked = metrics.NewDesc("baremetal_agent_wire_checked_addresses",
		"Addresses this node checks on the wire: those it would take over first.",
		nil, nil, metrics.ALPHA, "")
)

// DescribeWithStability implements metrics.StableCollector.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- descRounds
	ch <- descDark
	ch <- descChecked
}

// CollectWithStability implements metrics.StableCollector.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	st := c.c.Stats()
	for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
		for o := range outcomes {
			ch <- metrics.NewLazyConstMetric(descRounds, metrics.CounterValue, float64(st.Rounds[f][o]), f.String(), o.String())
		}
	}
	ch <- metrics.NewLazyConstMetric(descDark, metrics.GaugeValue, float64(st.Dark))
	ch <- metrics.NewLazyConstMetric(descChecked, metrics.GaugeValue, float64(st.Checked))
}
