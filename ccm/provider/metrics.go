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
		Help:           "Requests for addresses that were refused, by reason: that of the Warning event the Service got (AddressInUse, PoolExhausted, AddressNotInPool, PoolNotAllowed, UnknownPool, FamilyNotOffered or InvalidLoadBalancerRequest).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	restoredServices = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "restored_services",
		Help:           "Services whose addresses were restored from their status at start.",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(poolSize, poolUsed, allocations, releases, allocationRefusals, restoredServices)
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
