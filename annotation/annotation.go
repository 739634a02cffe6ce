// Package annotation holds the Service annotations of cloud-provider-baremetal, shared by
// the controller, which reads the user's and writes the announcer, and the agent, which
// reads the announcer.
package annotation

// Prefix starts every annotation of this project.
const Prefix = "lb.baremetal.io/"

// Annotations a user sets on a Service of type LoadBalancer.
const (
	// Pool names the one pool the Service's addresses come from.
	Pool = Prefix + "pool"
	// IPs lists the exact addresses wanted, comma-separated, at most one per family.
	// spec.loadBalancerIP is honoured the same way.
	IPs = Prefix + "ips"
	// AllowSharedIP is a sharing key: Services with the same key and no port in common
	// share one address, and so one announcing node.
	AllowSharedIP = Prefix + "allow-shared-ip"
	// PreferredNodes lists node names, comma-separated: the first eligible one announces.
	PreferredNodes = Prefix + "preferred-nodes"
)

// Announcer is written by the controller only: the node that announces the Service's
// addresses now.
const Announcer = Prefix + "announcer"
