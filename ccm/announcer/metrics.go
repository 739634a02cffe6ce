package announcer

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const subsystem = "baremetal_ccm"

var (
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
	standbysHeld = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "standby_writes_held_total",
		Help:           "Changes of a Service's standbys alone not written, as they would only name nodes back from down for less than 10s, which may be flapping; written once the nodes hold up.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(announcerChanges, servicesPerAnnouncer, servicesWithoutAnnouncer, standbysHeld)
	})
}
