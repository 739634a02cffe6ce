package config

import "k8s.io/component-base/metrics"

const subsystem = "baremetal_cloud_config"

// The results of one reload, as the result label of reloadsTotal.
const (
	resultApplied    = "applied"
	resultInvalid    = "invalid"
	resultUnreadable = "unreadable"
)

var (
	reloadsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "reloads_total",
		Help:           "Changes of the cloud-config file seen while watching it, by result: applied, invalid (kept the last good one) or unreadable.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	lastReloadSuccessful = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "last_reload_successful",
		Help:           "1 while the cloud-config file on disk is the valid one in use, 0 while it is invalid or unreadable and the last good one is kept.",
		StabilityLevel: metrics.ALPHA,
	})
)

// Metrics returns the collectors of this package, to register.
func Metrics() []metrics.Registerable {
	return []metrics.Registerable{reloadsTotal, lastReloadSuccessful}
}
