// Package annotation holds the Service annotations of cloud-provider-baremetal, each with
// its type, default and an example, and Parse, the one reader of what a Service asks of
// the load balancer; and the one Node annotation, Drain, with ReadNode, the one reader of
// what a Node says of planned maintenance. The ccm (allocation, announcer, status) and the agent both decide from
// Parse's Request, so that no two places read a Service differently.
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
	// AllowSharedIP is a sharing key: Services of one namespace with the same key and no
	// port in common share one address, and so one announcing node.
	AllowSharedIP = Prefix + "allow-shared-ip"
	// SharedIPNamespaces lists other namespaces, comma-separated, whose Services may share
	// the address under the same AllowSharedIP key. Sharing across namespaces needs both
	// sides: each Service must name the other's namespace.
	SharedIPNamespaces = Prefix + "shared-ip-namespaces"
	// PreferredNodes lists node names, comma-separated: the first eligible one announces.
	PreferredNodes = Prefix + "preferred-nodes"
)

// The ccm's own annotations, written by it only: the plan for the Service's addresses.
const (
	// Announcer is the node that announces the Service's addresses now.
	Announcer = Prefix + "announcer"
	// Standbys lists, comma-separated, the nodes that take the addresses over, in order,
	// when the announcer is down: the agents act on it at once when the ccm's verdict, or
	// their own check while no ccm is heard, says so, without waiting for a new announcer
	// to be written.
	Standbys = Prefix + "standbys"
)

// The operator's annotation of a Node.
const (
	// Drain, "true", moves every address off the Node, in order: the new announcer
	// announces before the Node stops answering. "false" or absent: the Node may announce.
	Drain = Prefix + "drain"
)

// Spec documents one annotation. The configuration reference (docs/configuration.md) is
// checked against Specs.
type Spec struct {
	// Key is the annotation's name.
	Key string
	// Type says what the value holds, as people write it.
	Type string
	// Default is what an absent annotation means.
	Default string
	// Example is a value as written on a Service.
	Example string
	// WrittenBy is "user" for the annotations a user sets, "ccm" for the ccm's own.
	WrittenBy string
	// Object is the kind of object the annotation is set on: "Service" or "Node".
	Object string
	// MaxBytes is the longest value accepted: a longer one is refused whole.
	MaxBytes int
	// MaxItems is the most non-blank comma-separated entries of a list; 0 for a single
	// value.
	MaxItems int
}

// Limits of every value. Any Service owner writes them, and the ccm and every agent read
// them on every sync, so they are refused before anything reads them entry by entry.
const (
	// MaxValueBytes is the longest value of any annotation of this project.
	MaxValueBytes = 4096
	// MaxListItems is the most entries of a list of names: more preferred nodes or
	// standbys than that are never tried in time, and more namespaces are a policy no one
	// reviews.
	MaxListItems = 64
)

// Specs lists every annotation of the project.
var Specs = []Spec{
	{Key: Pool, Type: "pool name", Default: "the first auto-assign pool open to the Service", Example: "public", WrittenBy: "user", Object: "Service", MaxBytes: MaxValueBytes},
	{Key: IPs, Type: "comma-separated IP addresses, at most one per family", Default: "the lowest free address of each family", Example: "192.0.2.10,2001:db8::10", WrittenBy: "user", Object: "Service", MaxBytes: MaxValueBytes, MaxItems: 2},
	{Key: AllowSharedIP, Type: "sharing key (any text)", Default: "the address is the Service's alone", Example: "web", WrittenBy: "user", Object: "Service", MaxBytes: MaxValueBytes},
	{Key: SharedIPNamespaces, Type: "comma-separated namespace names", Default: "sharing stays within the Service's namespace", Example: "team-b", WrittenBy: "user", Object: "Service", MaxBytes: MaxValueBytes, MaxItems: MaxListItems},
	{Key: PreferredNodes, Type: "comma-separated node names, in order of preference", Default: "no preference", Example: "edge-1,edge-2", WrittenBy: "user", Object: "Service", MaxBytes: MaxValueBytes, MaxItems: MaxListItems},
	{Key: Announcer, Type: "node name", Default: "no node announces", Example: "node-a", WrittenBy: "ccm", Object: "Service", MaxBytes: MaxValueBytes},
	{Key: Standbys, Type: "comma-separated node names, in order", Default: "no node stands by", Example: "node-b,node-c", WrittenBy: "ccm", Object: "Service", MaxBytes: MaxValueBytes, MaxItems: MaxListItems},
	{Key: Drain, Type: "true or false", Default: "false: the node may announce", Example: "true", WrittenBy: "user", Object: "Node", MaxBytes: MaxValueBytes},
}
