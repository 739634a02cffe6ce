// Package config reads the cloud-config: the pools of addresses the cloud-controller-manager
// gives to LoadBalancer Services, how the node agents watch each other to fail over, and
// how often they announce their addresses again. The controller and the agent read the
// same file, so they always agree on the pools.
//
// The file is YAML, read strictly: unknown fields, wrong types and bad values are all
// reported at once, each with its line, so that an operator can fix a file in one go
// instead of one error per restart.
package config

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Config is a valid cloud-config.
type Config struct {
	// Pools are in the order written. No two share an address.
	Pools []Pool
	// Failover holds the defaults for what the file leaves out.
	Failover Failover
	// Announcements holds the defaults for what the file leaves out.
	Announcements Announcements
	// Maintenance holds the defaults for what the file leaves out.
	Maintenance Maintenance

	// digest is the SHA-256 of the bytes the config was parsed from, so that Watch knows
	// whether the file still holds this config.
	digest [sha256.Size]byte
}

// digestOr returns the digest of data, which c (nil for a file that did not parse) was
// parsed from.
func (c *Config) digestOr(data []byte) [sha256.Size]byte {
	if c != nil {
		return c.digest
	}
	return sha256.Sum256(data)
}

// Pool is a named set of addresses, with the Services that may take them and the Nodes
// that may announce them.
type Pool struct {
	// Name is unique among the pools; a Service asks for the pool by it.
	Name string
	// Ranges are in the order written.
	Ranges []iprange.Range
	// AutoAssign lets Services that ask for no pool in particular draw from this one.
	AutoAssign bool
	// AvoidBuggyIPs keeps IPv4 addresses ending in .0 or .255 from being handed out,
	// as some clients' firmware takes them for network or broadcast addresses.
	AvoidBuggyIPs bool
	// Namespaces are the only namespaces whose Services may use the pool; empty means all.
	Namespaces []string
	// ServiceSelector picks the Services that may use the pool.
	ServiceSelector labels.Selector
	// NodeSelector picks the Nodes that may announce the pool's addresses.
	NodeSelector labels.Selector
	// Interfaces are the network interfaces the agent announces on; empty leaves it to the agent.
	Interfaces []string
}

// RangesOf returns the ranges of every pool of pools, in order.
func RangesOf(pools []Pool) []iprange.Range {
	var out []iprange.Range
	for _, p := range pools {
		out = append(out, p.Ranges...)
	}
	return out
}

// Failover tunes how the ccm notices a dead agent and moves its addresses to another node.
type Failover struct {
	// ProbeInterval is the time between two health probes of an agent: 100ms unless set.
	ProbeInterval time.Duration
	// FailureThreshold is how many probes in a row must go unanswered before an agent is
	// taken for dead: 3 unless set.
	FailureThreshold int
	// BusyTimeout is how long an agent that misses its probes while it shows signs of
	// life (its node's kernel answers ICMP echo, or the agent answers probes late) is
	// still taken for alive: a node whose cores are all busy, or whose agent's CPU quota
	// is spent, is not failed over. A dead node answers no echo and is taken for down
	// after FailureThreshold misses as before; an agent that is gone from a live node,
	// by the ICMP port unreachable its node sends. 2s unless set.
	BusyTimeout time.Duration
	// AgentPort is the UDP port of the agent's health responder: 7474 unless set.
	AgentPort int
	// IsolationShare is the share of the probed agents (more than it, and at least 2) that
	// must stop answering at once for the ccm to take it for its own isolation and keep
	// every agent's state rather than fail them all over: 0.5 unless set.
	IsolationShare float64
	// Failback moves an address back to the node the rule ranks first when that node
	// becomes eligible again. Off unless set: a node that comes back after a failure does
	// not take its addresses back, since moving them breaks connections a second time.
	Failback bool
	// Rebalance moves addresses away from a node that announces more than its bound
	// (pick.Bound of its fair share), to equal candidates under theirs, as nodes join or
	// Services go. On unless set; off, an address moves only when its announcer fails or
	// a better candidate appears.
	Rebalance bool
}

var defaultFailover = Failover{
	ProbeInterval:    100 * time.Millisecond,
	FailureThreshold: 3,
	BusyTimeout:      DefaultBusyTimeout,
	AgentPort:        7474,
	IsolationShare:   DefaultIsolationShare,
	Rebalance:        true,
}

// Announcements tunes what the agents send, unasked, about the addresses they answer for.
type Announcements struct {
	// RefreshInterval is how often each address an agent announces is announced again,
	// after the announcements that follow taking it: DefaultRefreshInterval unless set;
	// 0 turns the refresh off. Some devices on the network forget an address, or the
	// node's MAC, that nothing has told them about for a while, or missed the takeover.
	RefreshInterval time.Duration
	// CheckInterval is how often a node asks, as a client does, for each address it would
	// take over first, to check that its announcer answers on the wire:
	// DefaultCheckInterval unless set; 0 turns the check off. Each address is asked for
	// at its own phase of the interval, give or take a quarter of it.
	CheckInterval time.Duration
}

// Maintenance says what the ccm and the agents make of an operator's planned maintenance
// of a node, besides the lb.baremetal.io/drain annotation, which always drains it.
type Maintenance struct {
	// DrainOnCordon treats a cordoned Node (spec.unschedulable) as drained: its addresses
	// move off it as with the drain annotation. Off unless set: a node is cordoned for
	// many reasons that have nothing to do with its network (a kernel upgrade waiting for
	// its pods to leave, a full disk, an autoscaler), and moving addresses resets every
	// connection through them; an operator who cordons only for maintenance turns it on.
	DrainOnCordon bool
}

// DefaultRefreshInterval is the Announcements.RefreshInterval of a file that sets none:
// several times within the 300 s switches keep a silent MAC, so that a lost frame or two
// change nothing, at a cost of one frame a minute per address.
const DefaultRefreshInterval = 60 * time.Second

// DefaultCheckInterval is the Announcements.CheckInterval of a file that sets none: two
// rounds unanswered, well under a minute, tell a dark responder, at a cost of one request
// a node every 20 s per address it backs, a few frames a second for thousands.
const DefaultCheckInterval = 20 * time.Second

var defaultAnnouncements = Announcements{RefreshInterval: DefaultRefreshInterval, CheckInterval: DefaultCheckInterval}

// DefaultBusyTimeout is the BusyTimeout of a file that sets none: long enough for an agent
// with a few percent of a core to answer, short enough that a hung agent on a live node
// moves its addresses within seconds, as keepalived's defaults would.
const DefaultBusyTimeout = 2 * time.Second

// DefaultIsolationShare is the IsolationShare of a file that sets none.
const DefaultIsolationShare = 0.5

// Load reads the cloud-config file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cloud-config: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a cloud-config from data. name, usually the file's path, starts every problem
// reported, as in "cloud.yaml:7: pools[1].addresses[0]: ...". If anything is wrong, the error
// is a *multierror.Error holding every problem, in the order of their lines.
func Parse(name string, data []byte) (*Config, error) {
	c := &checker{file: name}
	cfg := c.document(data)
	if err := c.err(); err != nil {
		return nil, err
	}
	cfg.digest = sha256.Sum256(data)
	return cfg, nil
}

// Pool returns the pool called name, or nil if there is none.
func (c *Config) Pool(name string) *Pool {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i]
		}
	}
	return nil
}

// PoolFor returns the pool that a belongs to, or nil if it is in none. As pools never
// overlap, there is at most one.
func (c *Config) PoolFor(a netip.Addr) *Pool {
	for i := range c.Pools {
		if c.Pools[i].Contains(a) {
			return &c.Pools[i]
		}
	}
	return nil
}

// AllowsService reports whether a Service in namespace, with serviceLabels, may take an
// address from p.
func (p *Pool) AllowsService(namespace string, serviceLabels labels.Set) bool {
	if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, namespace) {
		return false
	}
	// A Pool built by hand rather than parsed may have no selector; it then selects all.
	return p.ServiceSelector == nil || p.ServiceSelector.Matches(serviceLabels)
}

// Contains reports whether a lies in one of p's ranges. An address that AvoidBuggyIPs keeps
// from being handed out still belongs to the pool.
func (p *Pool) Contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// HasFamily reports whether p offers any address of family f. With AvoidBuggyIPs, an IPv4
// range made only of addresses ending in .0 and .255 offers none.
func (p *Pool) HasFamily(f iprange.Family) bool {
	for _, r := range p.Ranges {
		if r.Family() != f {
			continue
		}
		if !p.AvoidBuggyIPs || r.Size().Cmp(big.NewInt(r.BuggyIPv4Count())) > 0 {
			return true
		}
	}
	return false
}
