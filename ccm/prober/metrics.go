package prober

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const subsystem = "baremetal_ccm"

var (
	probesSent = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probes_total",
		Help:           "Health probes sent to node agents.",
		StabilityLevel: metrics.ALPHA,
	})
	probeSendErrors = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_send_errors_total",
		Help:           "Health probes this host could not send (no route, a firewall on this host); the agent's next ones are retried with backoff.",
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
		Help:           "Node agents by state: up, down, draining, replaced (answering while another agent stands in for it) or unknown (not yet probed enough).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	unauthenticatedReplies = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_unauthenticated_replies_total",
		Help:           "Datagrams received on a probe socket whose code was not made with the probe key: forged, or from an agent with another key.",
		StabilityLevel: metrics.ALPHA,
	})
	refusals = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_refusals_total",
		Help:           "Probes an agent refused as not made with its probe key: the agent has another key than the ccm.",
		StabilityLevel: metrics.ALPHA,
	})
	verdictsSent = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "verdicts_sent_total",
		Help:           "Verdicts sent to node agents: to every agent when the verdict changes, and to an agent that holds an older one.",
		StabilityLevel: metrics.ALPHA,
	})
	dutiesSent = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "duties_sent_total",
		Help:           "Duty lists sent to node agents whose own view of what they announce differed from the ccm's.",
		StabilityLevel: metrics.ALPHA,
	})
	dutiesExpedited = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "duties_expedited_total",
		Help:           "Probes brought forward because the agent's duty changed: the request carries its new digest at once rather than in the agent's next slot.",
		StabilityLevel: metrics.ALPHA,
	})
	verdictDown = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "verdict_down_nodes",
		Help:           "Nodes the current verdict takes for down: their agents do not answer, or other agents stand in for them.",
		StabilityLevel: metrics.ALPHA,
	})
	agentTransitions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_state_changes_total",
		Help:           "Changes of a node agent's state, by the new state.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
)

var (
	isolated = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "prober_isolated",
		Help:           "1 while the prober takes itself for cut off from the agents (more than failover.isolationShare of them stopped answering at once) and keeps every agent's state; 0 otherwise.",
		StabilityLevel: metrics.ALPHA,
	})
	isolations = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "prober_isolations_total",
		Help:           "Episodes in which the prober took itself for cut off from the agents.",
		StabilityLevel: metrics.ALPHA,
	})
	proberStalls = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "prober_stalls_total",
		Help:           "Times the prober ran later than a probe's timeout after it was due (this process had no CPU), and gave the probes out their time again instead of taking them for misses.",
		StabilityLevel: metrics.ALPHA,
	})
	censuses = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "prober_censuses_total",
		Help:           "Times every agent's next probe was brought forward, to tell an agent's death from this ccm's isolation before taking the agent for down.",
		StabilityLevel: metrics.ALPHA,
	})
)

// The signs of life that tell a busy agent from a dead node (signs.go).
var (
	echoesSent = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_echoes_total",
		Help:           "ICMP echo requests sent with the probes of agents that missed one, to tell a busy agent (its node answers) from a dead node.",
		StabilityLevel: metrics.ALPHA,
	})
	echoReplies = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_echo_replies_total",
		Help:           "ICMP echo replies that came while their probe was out: the agent's node lives.",
		StabilityLevel: metrics.ALPHA,
	})
	lateAnswers = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_late_answers_total",
		Help:           "Answers to probes already taken for missed: the agent lives, but is slow (short of CPU).",
		StabilityLevel: metrics.ALPHA,
	})
	unreachables = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      subsystem,
		Name:           "agent_probe_port_unreachable_total",
		Help:           "Probes the agent's node answered with ICMP port unreachable: no agent listens there.",
		StabilityLevel: metrics.ALPHA,
	})
	busyAgents = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           "busy_agents",
		Help:           "Agents that miss their probes while showing signs of life, taken for alive for up to failover.busyTimeout after their last answer.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(probesSent, probeSendErrors, probeRTT, agentsByState, agentTransitions, unauthenticatedReplies, refusals, verdictsSent, dutiesSent, dutiesExpedited, verdictDown, isolated, isolations, censuses, proberStalls,
			echoesSent, echoReplies, lateAnswers, unreachables, busyAgents, idleAgents)
	})
}
