package provider

// HealthSource says what is known of each node's agent. The owner controller reads it for
// every decision; OnChange tells the controller which node changed, and HasSynced whether
// the source knows enough to decide anything at all.
type HealthSource interface {
	Health(node string) AgentState
	OnChange(func(node string))
	HasSynced() bool
}
