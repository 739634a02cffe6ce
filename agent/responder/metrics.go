package responder

import (
	"k8s.io/component-base/metrics"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// Collector exposes a Responder's Stats as metrics, read when scraped.
type Collector struct {
	metrics.BaseStableCollector
	r *Responder
}

// NewCollector returns a Collector of r's Stats, to register with a component-base registry.
func NewCollector(r *Responder) *Collector { return &Collector{r: r} }

var (
	descProbes = metrics.NewDesc("baremetal_agent_probes_total",
		"Health probes received, by outcome: answered, unanswered (the reply could not be sent), limited (over their sender's budget), replayed (a counter their sender used before), misdirected (for another node), unauthenticated (not made with the probe key) or malformed.",
		[]string{"outcome"}, nil, metrics.ALPHA, "")
	descVerdicts = metrics.NewDesc("baremetal_agent_verdicts_total",
		"Verdicts of the ccm received, by result: taken, or stale (not newer than the one held, or not of the ccm the agent follows).",
		[]string{"result"}, nil, metrics.ALPHA, "")
	descUnsigned = metrics.NewDesc("baremetal_agent_unsigned_datagrams_total",
		"Verdicts and duty lists made with the probe key but not signed by a public key the agent holds: forged by someone who holds the probe key, such as root on a node, or signed by a ccm whose new key the agent does not hold yet.",
		nil, nil, metrics.ALPHA, "")
	descDraining = metrics.NewDesc("baremetal_agent_draining",
		"1 while the agent is draining (shutting down), else 0.",
		nil, nil, metrics.ALPHA, "")
)

// DescribeWithStability implements metrics.StableCollector.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- descProbes
	ch <- descVerdicts
	ch <- descUnsigned
	ch <- descDraining
}

// CollectWithStability implements metrics.StableCollector.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	st := c.r.Stats()
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Replies), "answered")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Requests-st.Replies-st.Limited-st.Replayed-st.Misdirected), "unanswered")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Limited), "limited")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Replayed), "replayed")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Misdirected), "misdirected")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Unauthenticated), "unauthenticated")
	ch <- metrics.NewLazyConstMetric(descProbes, metrics.CounterValue, float64(st.Malformed), "malformed")
	ch <- metrics.NewLazyConstMetric(descVerdicts, metrics.CounterValue, float64(st.Verdicts), "taken")
	ch <- metrics.NewLazyConstMetric(descVerdicts, metrics.CounterValue, float64(st.StaleVerdicts), "stale")
	ch <- metrics.NewLazyConstMetric(descUnsigned, metrics.CounterValue, float64(st.Unsigned))
	draining := 0.0
	if c.r.State() == probe.Draining {
		draining = 1
	}
	ch <- metrics.NewLazyConstMetric(descDraining, metrics.GaugeValue, draining)
}
