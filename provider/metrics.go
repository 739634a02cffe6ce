package provider

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ipam"
)

const subsystem = "baremetal_ccm"

var (
	poolSize = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "pool_addresses",
		Help:           "Addresses a pool can hand out, per pool and family.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pool", "family"})
	poolUsed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "pool_addresses_used",
		Help:           "Addresses of a pool held by Services, per pool and family.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"pool", "family"})
	allocations = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "address_assignments_total",
		Help:           "Times a Service was given new addresses.",
		StabilityLevel: metrics.ALPHA,
	})
	releases = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "address_releases_total",
		Help:           "Times a Service's addresses were released.",
		StabilityLevel: metrics.ALPHA,
	})
	allocationRefusals = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "address_refusals_total",
		Help:           "Requests for addresses that were refused, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	restoredServices = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "restored_services",
		Help:           "Services whose addresses were restored from their status at start.",
		StabilityLevel: metrics.ALPHA,
	})

	probesSent = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probes_total",
		Help:           "Health probes sent to node agents.",
		StabilityLevel: metrics.ALPHA,
	})
	probeRTT = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_rtt_seconds",
		Help:           "Round-trip time of answered health probes.",
		Buckets:        metrics.ExponentialBuckets(0.0001, 2, 12),
		StabilityLevel: metrics.ALPHA,
	})
	agentsByState = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "agents",
		Help:           "Node agents by state: up, down, draining or unknown (not yet probed enough).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	agentTransitions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_state_changes_total",
		Help:           "Changes of a node agent's state, by the new state.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})

	announcerChanges = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "announcer_changes_total",
		Help:           "Announcer annotations written or removed, by the reason of the new choice.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	servicesPerAnnouncer = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "announced_services",
		Help:           "Services whose addresses each node announces.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"node"})
	servicesWithoutAnnouncer = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "services_without_announcer",
		Help:           "Services with addresses that no node may announce.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(poolSize, poolUsed, allocations, releases, allocationRefusals, restoredServices, announcerChanges, servicesPerAnnouncer, servicesWithoutAnnouncer,
			probesSent, probeRTT, agentsByState, agentTransitions)
	})
}

// updatePoolMetrics publishes the allocator's figures. An IPv6 pool's size is rounded to a
// float64, which is exact enough for a gauge.
func updatePoolMetrics(a *ipam.Allocator) {
	for _, st := range a.Stats() {
		size, _ := st.Size.Float64()
		poolSize.WithLabelValues(st.Pool, st.Family.String()).Set(size)
		poolUsed.WithLabelValues(st.Pool, st.Family.String()).Set(float64(st.Used))
	}
}
