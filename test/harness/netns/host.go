package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// A Host is one network namespace of a Network: a node, the client, the bridge or a pod.
// Its methods are safe for concurrent use.
type Host struct {
	// Name is the name of the namespace, as ip netns knows it: bmt-<pid>-<n>-<label>, and
	// bmt-<pid>-<n>-<node label>-pod<k> for pod k of a node.
	Name string
	// Label is node1, node2, …, client or bridge: a short name for logs and Kubernetes
	// node names. A host's port on the bridge, the peer of its eth0, has this name too.
	// A pod's Label is the name AddPod was given; its port on the node's PodBridge is
	// veth<k>.
	Label string
	// Interface is the host's interface on the segment: eth0, or br0 for the bridge. A
	// pod's is eth0 too, on its node's PodBridge.
	Interface string
	// MAC is the hardware address of Interface, 02:00:00:00:00:<host number>, and
	// 02:00:01:00:<node number>:<k> for pod k of a node.
	MAC net.HardwareAddr
	// IPv4 and IPv6 are the addresses of Interface, in Network.Subnet4 and Subnet6; a
	// pod's are in its node's PodSubnet4 and PodSubnet6.
	IPv4, IPv6 netip.Addr
	// LinkLocal is the IPv6 link-local address of Interface, which NDP replies come from.
	LinkLocal netip.Addr
	// PodSubnet4 and PodSubnet6 are a node's pod range, 198.19.<node number>.0/24 and
	// fd00:198:19:<node number in hex>::/64; their first addresses, on the node's
	// PodBridge, are its pods' gateways. They are invalid for the other hosts.
	PodSubnet4, PodSubnet6 netip.Prefix
	// Node is, for a pod, the node it runs on; nil for the other hosts.
	Node *Host

	num  byte   // host number: the last byte of IPv4
	port string // a pod's end of its veth in the node's namespace

	mu     sync.Mutex
	routes []string // the routes via Interface that the Network added, as ip route takes them
}

// commandTimeout bounds the ip(8) commands of Host methods that take no context.
const commandTimeout = 10 * time.Second

// Command returns a command that runs the program name with args inside the host's
// namespace, as `ip netns exec`, ready for the caller to set up and start (with
// process.StartCmd, for instance). The program sees the namespace's interfaces, and
// /sys of the namespace; the rest of the file system is the host's.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Run runs the program name with args inside the host's namespace and returns what it
// printed on stdout and stderr. On failure the error quotes that output.
func (h *Host) Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := h.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %w", h.Name, strings.Join(append([]string{name}, args...), " "), withOutput(err, out))
	}
	return string(out), nil
}

// Do runs fn on an OS thread that is inside the host's namespace, and returns fn's
// error. Sockets that fn creates belong to the namespace for their whole life, whichever
// goroutine uses them later: this is how a test listens or dials inside a host without a
// child process. Only fn's own goroutine is inside; goroutines that fn starts are not.
// fn runs on a goroutine of its own, so it must not call t.FailNow or runtime.Goexit.
func (h *Host) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Locked for good: unlocked below only once the thread is back in its own
		// namespace. A goroutine that exits locked takes its thread with it, so a thread
		// stuck in the wrong namespace never runs another goroutine.
		runtime.LockOSThread()
		err, restored := h.do(fn)
		if restored {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// do runs fn inside the namespace on the calling, locked, thread and switches back. It
// reports whether the thread is in its original namespace afterwards.
func (h *Host) do(fn func() error) (err error, restored bool) {
	orig, err := vnetns.Get()
	if err != nil {
		return fmt.Errorf("netns %s: open the current namespace: %w", h.Name, err), true
	}
	defer orig.Close()
	target, err := vnetns.GetFromName(h.Name)
	if err != nil {
		return fmt.Errorf("netns %s: open: %w", h.Name, err), true
	}
	defer target.Close()
	if err := vnetns.Set(target); err != nil {
		return fmt.Errorf("netns %s: enter: %w", h.Name, err), true
	}
	fnErr := fn()
	if err := vnetns.Set(orig); err != nil {
		return errors.Join(fnErr, fmt.Errorf("netns %s: return to the original namespace: %w", h.Name, err)), false
	}
	return fnErr, true
}

// Listen announces on the local network address inside the host's namespace, as
// net.Listen does.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := h.Do(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", h.Name, err)
	}
	return ln, nil
}

// Dial connects to address from inside the host's namespace, as net.Dialer.DialContext
// does.
func (h *Host) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", h.Name, err)
	}
	return c, nil
}

// SetLink sets the host's interface down or up. Down, the host is cut off from the
// segment as if its cable were pulled (its bridge port loses carrier too), which is how
// tests kill a node's network. Up, it returns with the same addresses, and SetLink
// returns once its link-local address is usable again.
func (h *Host) SetLink(up bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	state := "down"
	if up {
		state = "up"
	}
	if _, err := h.ip(ctx, "link", "set", h.Interface, state); err != nil {
		return err
	}
	if up {
		if _, err := h.linkLocal(ctx); err != nil {
			return err
		}
		// The kernel removed the routes via the link when it went down; a node's network
		// configuration puts them back when it comes up.
		h.mu.Lock()
		routes := slices.Clone(h.routes)
		h.mu.Unlock()
		for _, r := range routes {
			if _, err := h.ip(ctx, append([]string{"route", "replace"}, strings.Fields(r)...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRoutes adds routes via the host's Interface, each as ip route add takes it, and
// keeps them for SetLink to put back.
func (h *Host) addRoutes(ctx context.Context, routes ...string) error {
	lines := make([]string, len(routes))
	for i, r := range routes {
		lines[i] = "route add " + r
	}
	if err := ipBatch(ctx, h.Name, lines...); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes = append(h.routes, routes...)
	return nil
}

// AddLocal adds addr, as a /32 or /128, to the host's lo, so that the host accepts
// traffic for it, as a node does for a Service address. On a node the kernel does not
// answer ARP or NDP for it on eth0.
func (h *Host) AddLocal(addr netip.Addr) error {
	return h.local("add", addr)
}

// DelLocal removes addr, added by AddLocal, from the host's lo.
func (h *Host) DelLocal(addr netip.Addr) error {
	return h.local("del", addr)
}

func (h *Host) local(op string, addr netip.Addr) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	addr = addr.Unmap()
	args := []string{"addr", op, netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "lo"}
	if addr.Is6() {
		// Usable at once, and not deleted when lo goes down and up.
		args = append(args, "nodad")
	}
	_, err := h.ip(ctx, args...)
	return err
}

// EnableForwarding turns on IPv4 and IPv6 forwarding in the host's namespace, as a
// Kubernetes node has it: kube-proxy hands traffic for a Service address on to endpoints
// on other nodes, which the kernel does only while forwarding. Create leaves forwarding
// as a new namespace gets it: IPv4 forwarding copied from the machine's, IPv6 forwarding
// off. A node's ARP settings (arp_ignore, arp_announce) stay as they are.
func (h *Host) EnableForwarding() error {
	return h.setSysctls([]sysctl{
		{"net/ipv4/ip_forward", "1"},
		{"net/ipv6/conf/all/forwarding", "1"},
	})
}

// Neighbor returns the host's neighbour table entry for addr on its interface: the
// hardware address, nil for an entry without one (INCOMPLETE or FAILED), and the state
// as ip(8) prints it, such as REACHABLE, STALE or PERMANENT. Without an entry it returns
// a nil address, an empty state and no error.
//
// It reads the table through netlink from inside the namespace rather than by running
// ip(8): a test that polls for a change sees it within a fraction of a millisecond.
func (h *Host) Neighbor(addr netip.Addr) (mac net.HardwareAddr, state string, err error) {
	addr = addr.Unmap()
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	err = h.Do(func() error {
		link, err := netlink.LinkByName(h.Interface)
		if err != nil {
			return err
		}
		neighs, err := netlink.NeighList(link.Attrs().Index, family)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
				state = neighState(n.State)
				if len(n.HardwareAddr) > 0 {
					mac = n.HardwareAddr
				}
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("netns %s: neighbour %s: %w", h.Name, addr, err)
	}
	return mac, state, nil
}

// neighState names a neighbour state as ip(8) does.
func neighState(s int) string {
	var names []string
	for _, n := range []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"}, {netlink.NUD_STALE, "STALE"},
		{netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"}, {netlink.NUD_FAILED, "FAILED"},
		{netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	} {
		if s&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, " ")
}

// FlushNeighbors empties the host's neighbour table on its interface, permanent entries
// included, so that the next packet to any neighbour resolves it afresh.
func (h *Host) FlushNeighbors() error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	_, err := h.ip(ctx, "neigh", "flush", "dev", h.Interface, "nud", "all")
	return err
}

// linkLocal waits until the host's interface has a link-local address that is not
// tentative, and returns it.
func (h *Host) linkLocal(ctx context.Context) (netip.Addr, error) {
	for {
		out, err := h.ip(ctx, "-json", "-6", "addr", "show", "dev", h.Interface, "scope", "link")
		if err != nil {
			return netip.Addr{}, err
		}
		var links []struct {
			AddrInfo []struct {
				Local      string `json:"local"`
				Tentative  bool   `json:"tentative"`
				DADFailed  bool   `json:"dadfailed"`
				Deprecated bool   `json:"deprecated"`
			} `json:"addr_info"`
		}
		if err := json.Unmarshal([]byte(out), &links); err != nil {
			return netip.Addr{}, fmt.Errorf("netns %s: link-local address of %s: parse %q: %w", h.Name, h.Interface, out, err)
		}
		for _, l := range links {
			for _, a := range l.AddrInfo {
				addr, err := netip.ParseAddr(a.Local)
				if err == nil && addr.IsLinkLocalUnicast() && !a.Tentative && !a.DADFailed && !a.Deprecated {
					return addr, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("netns %s: no usable link-local address on %s: %w (last seen: %s)",
				h.Name, h.Interface, ctx.Err(), strings.TrimSpace(out))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ip runs ip(8) with args inside the host's namespace and returns its stdout.
func (h *Host) ip(ctx context.Context, args ...string) (string, error) {
	out, err := output(ctx, "ip", append([]string{"-n", h.Name}, args...)...)
	if err != nil {
		return "", fmt.Errorf("netns %s: ip %s: %w", h.Name, strings.Join(args, " "), err)
	}
	return out, nil
}

// ipBatch runs the ip(8) commands of lines in one process inside the namespace ns.
func ipBatch(ctx context.Context, ns string, lines ...string) error {
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns %s: ip -batch [%s]: %w", ns, strings.Join(lines, "; "), withOutput(err, out))
	}
	return nil
}

// runCmd runs a program in the root namespace and returns its stdout; its error names
// the command and quotes stderr.
func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	out, err := output(ctx, name, args...)
	if err != nil {
		return out, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}

// output runs a program and returns its stdout; its error quotes stderr.
func output(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), withOutput(err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// withOutput adds what a failed command printed to its error.
func withOutput(err error, out []byte) error {
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("%w: %s", err, s)
	}
	return err
}

// Path is the file that holds the host's namespace, for programs that join it by path.
func (h *Host) Path() string { return filepath.Join(netnsDir, h.Name) }
