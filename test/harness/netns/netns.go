// Package netns builds a small layer-2 network out of Linux network namespaces, for the
// end-to-end tests, the failover benchmark and the demo. It needs root and iproute2.
//
// A Network is one Ethernet segment, and every node has a pod network of its own:
//
//	               bridge namespace: br0 198.18.0.254, fd00:198:18::fe
//	              /                         |                       \
//	node1 eth0 198.18.0.1       node2 eth0 198.18.0.2   ...   client eth0 198.18.0.200
//	           fd00:198:18::1              fd00:198:18::2                 fd00:198:18::c8
//	      cbr0 198.19.1.1             cbr0 198.19.2.1
//	           fd00:198:19:1::1            fd00:198:19:2::1
//	        /         \                     |
//	pod eth0 198.19.1.2  ...          pod eth0 198.19.2.2
//	         fd00:198:19:1::2                  fd00:198:19:2::2
//
// The bridge br0 lives in a namespace of its own, so that the host's iptables and
// br_netfilter never see the traffic. Every node and the client is a namespace with lo up
// and one interface on the segment, eth0, a veth whose peer is a port of br0. Addresses
// come from the benchmarking range 198.18.0.0/24 and the ULA prefix fd00:198:18::/64
// only; host number h (1…199 for the nodes, 200 for the client, 254 for the bridge) has
// the IPv4 address 198.18.0.h, the IPv6 address fd00:198:18::h (h in hex, as IPv6 writes
// it) and the MAC 02:00:00:00:00:h, so that tests can assert on all three.
//
// The nodes behave like Kubernetes nodes whose Service addresses sit on a local
// interface (as kube-proxy's IPVS dummy interface does): they have arp_ignore=1 and
// arp_announce=2, so their kernels never answer ARP on eth0 for an address added with
// AddLocal. Answering is the node agent's job. (The kernel never answers neighbour
// solicitations for an address on another interface, so IPv6 needs no such setting.)
//
// Pods. Node number N owns the pod range 198.19.N.0/24 and fd00:198:19:N::/64 (N in
// hex), inside the cluster's pod ranges 198.19.0.0/16 (the other half of the
// benchmarking range 198.18.0.0/15) and fd00:198:19::/48 (the project's ULA prefix). Like
// a node of a real cluster with a bridge CNI plugin, each node has, from Create on, a
// bridge cbr0 (PodBridge) holding the range's gateway addresses .1 and ::1, and a route
// to every other node's pod range via that node's eth0 address. AddPod adds pods, each a
// namespace whose eth0 is a veth into its node's cbr0, with the addresses .k and ::k of
// the range (k from 2 up, the lowest free one), the MAC 02:00:01:00:N:k and default
// routes via the gateways; it turns IPv4 and IPv6 forwarding on in the node's namespace,
// which routes between eth0 and cbr0. Traffic between pods, and between nodes and pods,
// is routed without address translation, so a pod sees the address its peer sent from.
// The client has no route to the pod ranges: outside a cluster, pods are reached
// through Service addresses only. Service pools and subnets that a test adds must stay
// outside the pod ranges of its nodes: a node routes the other nodes' ranges to them,
// and once it has pods its cbr0 is an up link on its own range, where the agent would
// announce such a pool's addresses too.
//
// Every namespace name starts with bmt-<pid>-, the ID of the process that created it, so
// that Sweep can remove what a crashed run left behind.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// The test network's prefixes.
var (
	subnet4 = netip.MustParsePrefix("198.18.0.0/24")
	subnet6 = netip.MustParsePrefix("fd00:198:18::/64")
	// The pod ranges of all nodes: node N has the /24 and /64 numbered N within them.
	podSubnet4 = netip.MustParsePrefix("198.19.0.0/16")
	podSubnet6 = netip.MustParsePrefix("fd00:198:19::/48")
)

// Host numbers of the hosts that are not nodes; nodes are 1…MaxNodes.
const (
	clientHost = 200
	bridgeHost = 254
)

// MaxNodes is the largest number of nodes a Network can have: node host numbers must stay
// below the client's.
const MaxNodes = clientHost - 1

// namePrefix starts the name of every namespace this package creates.
const namePrefix = "bmt-"

// setupTimeout bounds each command that builds or tears down a Network, so that a hung
// ip(8) fails the caller instead of blocking it forever.
const setupTimeout = 30 * time.Second

// networks numbers the Networks of this process, to keep their namespace names apart.
var networks atomic.Int64

// sweepOnce runs Sweep before the first Network of the process is created.
var sweepOnce = sync.OnceValue(Sweep)

// A Network is a bridge, its nodes and a client, each in a network namespace of its own.
// Create one with Create or ForTest.
type Network struct {
	// Nodes are the hosts that play Kubernetes nodes: node1 is Nodes[0].
	Nodes []*Host
	// Client is the host that plays a client of the Services, outside the cluster.
	Client *Host
	// Bridge is the namespace that holds the bridge; its Interface is br0, which has an
	// address of its own that Forward listens on.
	Bridge *Host
	// Router and RoutedClient are nil until AddRouter: a router on the segment and a
	// client on a subnet of its own behind it.
	Router, RoutedClient *Host
	// Subnet4 and Subnet6 are the prefixes of the segment: 198.18.0.0/24 and
	// fd00:198:18::/64.
	Subnet4, Subnet6 netip.Prefix
	// PodSubnet4 and PodSubnet6 hold the pod ranges of all nodes, 198.19.0.0/16 and
	// fd00:198:19::/48: the cluster's pod CIDRs, such as kube-proxy's --cluster-cidr
	// takes.
	PodSubnet4, PodSubnet6 netip.Prefix

	prefix     string // starts the name of every namespace of n
	mu         sync.Mutex
	created    []string // namespaces created so far, in order of creation
	pods       []*Host  // pods added and not removed, in order of creation
	extra      []*Host  // hosts added by AddHost
	forwarders []*forwarder
	closed     bool
	closeErr   error
}

// Create builds a Network with the given number of nodes (1 to MaxNodes) and a client,
// and returns once every host can send and receive on IPv4 and IPv6. On error nothing of
// it is left behind. The first call in a process runs Sweep first. Close the Network
// when done with it.
func Create(nodes int) (*Network, error) {
	if nodes < 1 || nodes > MaxNodes {
		return nil, fmt.Errorf("create network: %d nodes: want 1 to %d", nodes, MaxNodes)
	}
	if err := sweepOnce(); err != nil {
		return nil, fmt.Errorf("create network: remove what earlier runs left: %w", err)
	}
	prefix := fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), networks.Add(1))
	n := &Network{
		Bridge:     newHost(prefix, "bridge", "br0", bridgeHost),
		Client:     newHost(prefix, "client", "eth0", clientHost),
		Subnet4:    subnet4,
		Subnet6:    subnet6,
		PodSubnet4: podSubnet4,
		PodSubnet6: podSubnet6,
		prefix:     prefix,
	}
	for i := 1; i <= nodes; i++ {
		h := newHost(prefix, "node"+strconv.Itoa(i), "eth0", byte(i))
		h.PodSubnet4, h.PodSubnet6 = podRange(byte(i))
		n.Nodes = append(n.Nodes, h)
	}
	if err := n.build(); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return n, nil
}

// newHost describes host number num, named label, before its namespace exists.
func newHost(prefix, label, ifname string, num byte) *Host {
	v4 := subnet4.Addr().As4()
	v4[3] = num
	v6 := subnet6.Addr().As16()
	v6[15] = num
	return &Host{
		Name:      prefix + label,
		Label:     label,
		Interface: ifname,
		MAC:       net.HardwareAddr{0x02, 0, 0, 0, 0, num},
		IPv4:      netip.AddrFrom4(v4),
		IPv6:      netip.AddrFrom16(v6),
		num:       num,
	}
}

// hosts returns the hosts that have an eth0 on the bridge: the nodes and the client.
func (n *Network) hosts() []*Host {
	return append(n.Nodes[:len(n.Nodes):len(n.Nodes)], n.Client)
}

// build creates the namespaces, links and addresses of n.
func (n *Network) build() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	all := append([]*Host{n.Bridge}, n.hosts()...)
	for _, h := range all {
		if _, err := runCmd(ctx, "ip", "netns", "add", h.Name); err != nil {
			return err
		}
		n.mu.Lock()
		n.created = append(n.created, h.Name)
		n.mu.Unlock()
	}
	// Before any interface exists, so that eth0 inherits the defaults.
	for _, h := range all {
		if err := h.setSysctls(baseSysctls(isNode(n, h))); err != nil {
			return err
		}
	}

	// mcast_snooping 0: the bridge floods multicast like a plain hub, so that a neighbour
	// solicitation reaches every node whatever MLD reports the bridge has or has not
	// seen: the agent answers for addresses whose groups its kernel never joined.
	br := n.Bridge
	err := ipBatch(ctx, br.Name,
		"link set lo up",
		fmt.Sprintf("link add br0 address %s type bridge stp_state 0 mcast_snooping 0", br.MAC),
		fmt.Sprintf("addr add %s dev br0", netip.PrefixFrom(br.IPv4, subnet4.Bits())),
		fmt.Sprintf("addr add %s dev br0 nodad", netip.PrefixFrom(br.IPv6, subnet6.Bits())),
		"link set br0 up",
	)
	if err != nil {
		return err
	}

	var ports []string
	var sysctls []sysctl
	for _, h := range n.hosts() {
		// The veth is created from the host's side and its peer, the bridge port named
		// after the host, goes straight into the bridge namespace: the root namespace
		// never sees either.
		err := ipBatch(ctx, h.Name,
			fmt.Sprintf("link add eth0 address %s type veth peer name %s netns %s", h.MAC, h.Label, br.Name),
			"link set lo up",
			fmt.Sprintf("addr add %s dev eth0", netip.PrefixFrom(h.IPv4, subnet4.Bits())),
			fmt.Sprintf("addr add %s dev eth0 nodad", netip.PrefixFrom(h.IPv6, subnet6.Bits())),
			"link set eth0 up",
		)
		if err != nil {
			return err
		}
		if isNode(n, h) {
			// Inherited from default already; set on eth0 too, as it is the interface
			// that matters.
			err := h.setSysctls([]sysctl{
				{"net/ipv4/conf/eth0/arp_ignore", "1"},
				{"net/ipv4/conf/eth0/arp_announce", "2"},
			})
			if err != nil {
				return err
			}
		}
		ports = append(ports, fmt.Sprintf("link set %s master br0 up", h.Label))
		// The ports are switch ports: no addresses, and no router solicitations or MLD
		// reports of their own on the wire.
		sysctls = append(sysctls, sysctl{"net/ipv6/conf/" + h.Label + "/disable_ipv6", "1"})
	}
	if err := br.setSysctls(sysctls); err != nil {
		return err
	}
	if err := ipBatch(ctx, br.Name, ports...); err != nil {
		return err
	}
	for _, node := range n.Nodes {
		if err := n.buildPodNetwork(ctx, node); err != nil {
			return err
		}
	}

	for _, h := range all {
		if h.LinkLocal, err = h.linkLocal(ctx); err != nil {
			return err
		}
	}
	return nil
}

func isNode(n *Network, h *Host) bool {
	for _, node := range n.Nodes {
		if node == h {
			return true
		}
	}
	return false
}

// A sysctl is a path below /proc/sys and the value to write to it.
type sysctl struct{ path, value string }

// baseSysctls returns the settings of a namespace that must be in place before its
// interfaces are created, so that they inherit them from default. IPv4 settings of a new
// namespace are copied from the host's, so everything the tests rely on is set
// explicitly rather than assumed.
func baseSysctls(node bool) []sysctl {
	arpIgnore, arpAnnounce := "0", "0"
	if node {
		arpIgnore, arpAnnounce = "1", "2"
	}
	return []sysctl{
		{"net/ipv4/conf/all/rp_filter", "0"},
		{"net/ipv4/conf/default/rp_filter", "0"},
		{"net/ipv4/conf/all/arp_ignore", arpIgnore},
		{"net/ipv4/conf/default/arp_ignore", arpIgnore},
		{"net/ipv4/conf/all/arp_announce", arpAnnounce},
		{"net/ipv4/conf/default/arp_announce", arpAnnounce},
		// No duplicate address detection: addresses, link-local ones included, are
		// usable at once instead of after a second or two, also after SetLink(true).
		{"net/ipv6/conf/all/accept_dad", "0"},
		{"net/ipv6/conf/default/accept_dad", "0"},
		// Keep IPv6 addresses while eth0 is down, as IPv4 ones are kept, so that
		// SetLink(false) then SetLink(true) gives back the host it took away.
		{"net/ipv6/conf/all/keep_addr_on_down", "1"},
		{"net/ipv6/conf/default/keep_addr_on_down", "1"},
	}
}

// setSysctls writes settings of the host's namespace: /proc/sys/net belongs to the
// namespace of the thread that opens it.
func (h *Host) setSysctls(s []sysctl) error {
	return h.Do(func() error {
		for _, s := range s {
			if err := os.WriteFile("/proc/sys/"+s.path, []byte(s.value), 0); err != nil {
				return fmt.Errorf("netns %s: set %s to %s: %w", h.Name, strings.ReplaceAll(s.path, "/", "."), s.value, err)
			}
		}
		return nil
	})
}

// Close deletes the namespaces of n, its pods' included, after killing every process
// inside them, and closes its forwarders. Sockets that the caller opened inside a
// namespace with Do keep what is left of it alive until they are closed. Close is safe
// to call more than once and from several goroutines; later calls return what the first
// returned.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	var errs []error
	for _, f := range n.forwarders {
		f.close()
	}
	// Hosts first, the bridge last: it was created first.
	for i := len(n.created) - 1; i >= 0; i-- {
		if err := deleteNamespace(n.created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	n.closeErr = errors.Join(errs...)
	return n.closeErr
}

// deleteNamespace kills every process in the namespace called name and deletes it.
func deleteNamespace(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	killErr := killAll(ctx, name)
	if _, err := runCmd(ctx, "ip", "netns", "delete", name); err != nil {
		return errors.Join(killErr, err)
	}
	return killErr
}

// killGrace bounds how long killAll waits for killed processes to be gone.
const killGrace = 5 * time.Second

// KillAll sends SIGKILL to every process in the host's namespace, what its programs
// started too (a container runtime's shims and containers, say), and waits until they
// have exited.
func (h *Host) KillAll(ctx context.Context) error { return killAll(ctx, h.Name) }

// killAll sends SIGKILL to every process in the namespace called name and waits until
// they have exited.
func killAll(ctx context.Context, name string) error {
	out, err := runCmd(ctx, "ip", "netns", "pids", name)
	if err != nil {
		return err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("netns %s: ip netns pids printed %q", name, out)
		}
		// Never this process: its main thread is never inside, but be sure.
		if pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("netns %s: kill process %d: %w", name, pid, err)
		}
		pids = append(pids, pid)
	}
	deadline := time.Now().Add(killGrace)
	for _, pid := range pids {
		for process.Alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("netns %s: process %d still alive %s after SIGKILL", name, pid, killGrace)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// netnsDir is where ip(8) keeps the named namespaces.
const netnsDir = "/var/run/netns"

// Sweep deletes the namespaces of this package whose creator (the pid in their name) is
// no longer alive, killing the processes inside them first, so that a run that crashed
// leaves nothing behind for the next. Namespaces of live processes, this one included,
// are left alone: they may belong to tests running in parallel. Create calls Sweep once
// per process.
func Sweep() error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep namespaces: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !process.Orphaned(namePrefix, e.Name()) {
			continue
		}
		err := deleteNamespace(e.Name())
		// Another process sweeping at the same time may have deleted it first.
		if _, statErr := os.Stat(filepath.Join(netnsDir, e.Name())); err != nil && !errors.Is(statErr, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sweep namespaces: %w", err))
		}
	}
	return errors.Join(errs...)
}
