// Command demo shows cloud-provider-baremetal working on one Linux machine: a real control
// plane, three node network namespaces on a bridge each running the real agent, the real
// ccm, and a client namespace. It creates a few Services, prints which node announces
// each one and why, takes the announcing node of one of them down, and prints the outage
// the client saw. Everything it creates is removed when it ends, also on Ctrl-C.
//
// Run it with `make demo`, as root.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/events"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/traffic"
)

const cloudConfig = `
pools:
- name: demo
  addresses: [198.18.0.100-198.18.0.150, "fd00:198:18::100-fd00:198:18::150"]
`

const plan = `cloud-provider-baremetal demo

This creates, and removes again when it ends (also on Ctrl-C):
  - an etcd and a kube-apiserver listening on 127.0.0.1 (built by make tools),
  - network namespaces named bmt-<pid>-*: a bridge, three nodes and a client, with the
    addresses 198.18.0.0/24 and fd00:198:18::/64 (the pods 198.19.0.0/16 and
    fd00:198:19::/48) inside them only,
  - a kube-proxy and a baremetal-agent on each node, pods (network namespaces with a
    small server) on them, kube-controller-manager's EndpointSlice controller, and one
    baremetal-ccm.
It needs root for the namespaces. Nothing outside them is touched.
`

func main() {
	fmt.Print(plan)
	if err := check(); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		os.Exit(1)
	}
	// Child processes log; the demo prints its own story.
	klog.LogToStderr(false)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx)
	if ctx.Err() != nil {
		fmt.Println("\nInterrupted; everything the demo created is removed.")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\nEverything the demo created is removed.\n", err)
		os.Exit(1)
	}
}

// check says, before anything is created, what is missing.
func check() error {
	if os.Geteuid() != 0 {
		return errors.New("it needs root to create network namespaces: run `sudo make demo`")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("it needs ip(8) from iproute2: install it, for example with `apt-get install iproute2`")
	}
	return nil
}

// service is one Service of the demo and where its endpoints are.
type service struct {
	name      string
	families  []corev1.IPFamily
	local     bool
	shared    string
	port      int32
	preferred string
	endpoints []string
	why       string
}

var services = []service{
	{name: "web-v4", families: []corev1.IPFamily{corev1.IPv4Protocol}, endpoints: []string{"node1", "node2"}, why: "IPv4"},
	{name: "web-v6", families: []corev1.IPFamily{corev1.IPv6Protocol}, endpoints: []string{"node2", "node3"}, why: "IPv6"},
	{name: "web-dual", families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, local: true, endpoints: []string{"node1", "node2", "node3"}, why: "dual-stack, Local"},
	{name: "shared-http", families: []corev1.IPFamily{corev1.IPv4Protocol}, shared: "demo", port: 80, endpoints: []string{"node3"}, why: "one address, two Services"},
	{name: "shared-https", families: []corev1.IPFamily{corev1.IPv4Protocol}, shared: "demo", port: 443, endpoints: []string{"node3", "node3"}, why: "one address, two Services"},
	{name: "local", families: []corev1.IPFamily{corev1.IPv4Protocol}, local: true, endpoints: []string{"node2"}, why: "externalTrafficPolicy Local"},
	{name: "preferred", families: []corev1.IPFamily{corev1.IPv4Protocol}, preferred: "node3", endpoints: []string{"node1", "node3"}, why: "preferred-nodes: node3"},
}

const namespace = "demo"

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "baremetal-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("Starting etcd and kube-apiserver")
	cp, err := controlplane.Start(ctx)
	if err != nil {
		if errors.Is(err, controlplane.ErrBinaryNotFound) {
			return fmt.Errorf("%w\nrun `make tools` first (the first build takes about 10 minutes)", err)
		}
		return err
	}
	defer func() {
		// The demo promises to remove all it created: a process that had to be killed, or
		// a directory left behind, is worth a word.
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "\nstop the control plane: %v\n", err)
		}
	}()

	step("Creating the network namespaces and starting an agent on each node")
	tb, err := testbed.New(ctx, cp, 3, cloudConfig, dir)
	if err != nil {
		return err
	}
	defer tb.Close()
	step("Starting baremetal-ccm")
	if _, err := tb.StartCCM(ctx); err != nil {
		return err
	}

	step("Creating the Services")
	if _, err := tb.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, s := range services {
		if err := create(ctx, tb, s); err != nil {
			return fmt.Errorf("create Service %s: %w", s.name, err)
		}
	}
	addrs, err := waitAnnounced(ctx, tb)
	if err != nil {
		return err
	}
	if err := printTable(ctx, tb, addrs); err != nil {
		return err
	}
	if err := clientAddress(ctx, tb, addrs["local"][0]); err != nil {
		return err
	}
	return failover(ctx, tb, addrs["web-dual"])
}

func step(what string) { fmt.Printf("\n==> %s\n", what) }

func create(ctx context.Context, tb *testbed.Cluster, s service) error {
	port := s.port
	if port == 0 {
		port = testbed.ServicePort
	}
	var nodes []*netns.Host
	for _, n := range s.endpoints {
		nodes = append(nodes, tb.Node(n))
	}
	if _, err := tb.Serve(ctx, namespace, s.name, nodes...); err != nil {
		return err
	}
	svc := testbed.ServiceFor(namespace, s.name, s.name)
	svc.Spec.Ports[0].Port = port
	svc.Spec.IPFamilies = s.families
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	if len(s.families) == 2 {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	if !s.local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if s.shared != "" {
		svc.Annotations[annotation.AllowSharedIP] = s.shared
	}
	if s.preferred != "" {
		svc.Annotations[annotation.PreferredNodes] = s.preferred
	}
	_, err := tb.Admin.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// clientAddress asks the Local Service from the client and prints what its pod saw: the
// client's own address, which a Local Service keeps.
func clientAddress(ctx context.Context, tb *testbed.Cluster, addr netip.Addr) error {
	step("What a pod of a Local Service sees of its client")
	// kube-proxy on the announcer may not have the Service's rules yet.
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	answer, err := traffic.AskUntil(ctx, tb.Net.Client.Dial, netip.AddrPortFrom(addr, testbed.ServicePort), time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("  the client (%s) asked %s; pod %s on %s answered and saw the client address %s\n",
		tb.Net.Client.IPv4, addr, answer.Pod, answer.Node, answer.Client)
	return nil
}

// waitAnnounced waits until every Service has its addresses and an announcer, and returns
// the addresses by Service.
func waitAnnounced(ctx context.Context, tb *testbed.Cluster) (map[string][]netip.Addr, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := tb.Admin.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string][]netip.Addr{}
		for _, svc := range list.Items {
			if svc.Annotations[annotation.Announcer] == "" || len(svc.Status.LoadBalancer.Ingress) < len(svc.Spec.IPFamilies) {
				continue
			}
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				out[svc.Name] = append(out[svc.Name], netip.MustParseAddr(ing.IP))
			}
		}
		if len(out) == len(services) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("after 30 s only %d of %d Services have addresses and an announcer", len(out), len(services))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// printTable prints every Service with its addresses, announcer and the ccm's reason,
// read from its last AnnouncerChanged event.
func printTable(ctx context.Context, tb *testbed.Cluster, addrs map[string][]netip.Addr) error {
	step("Which node announces what, and why")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SERVICE\tKIND\tADDRESSES\tENDPOINTS ON\tANNOUNCER\tWHY")
	for _, s := range services {
		svc, err := tb.Admin.CoreV1().Services(namespace).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var as []string
		for _, a := range addrs[s.name] {
			as = append(as, a.String())
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.name, s.why, strings.Join(as, ", "), strings.Join(slices.Compact(slices.Sorted(slices.Values(s.endpoints))), ", "),
			svc.Annotations[annotation.Announcer], reason(ctx, tb, s.name))
	}
	return w.Flush()
}

// reason returns the ccm's explanation of a Service's announcer, from its events.
func reason(ctx context.Context, tb *testbed.Cluster, name string) string {
	evs, err := events.List(ctx, tb.Admin, namespace, name, "AnnouncerChanged")
	if err != nil || len(evs) == 0 {
		return ""
	}
	last := slices.MaxFunc(evs, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	_, why, _ := strings.Cut(last.Message, ": ")
	return why
}

// failover takes the link of web-dual's announcing node down while a client in the
// client namespace sends a request every 10 ms to each of its addresses, and prints the
// outage each family saw.
func failover(ctx context.Context, tb *testbed.Cluster, addrs []netip.Addr) error {
	svc, err := tb.Admin.CoreV1().Services(namespace).Get(ctx, "web-dual", metav1.GetOptions{})
	if err != nil {
		return err
	}
	owner := svc.Annotations[annotation.Announcer]
	step(fmt.Sprintf("Failover: a client sends a request to each address of web-dual every 10 ms (100 ms timeout); %s, its announcer, loses its link", owner))
	var clients []*traffic.Client
	for _, a := range addrs {
		clients = append(clients, traffic.Start(tb.Net.Client.Dial, netip.AddrPortFrom(a, testbed.ServicePort), 10*time.Millisecond, 100*time.Millisecond))
	}
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	down := time.Now()
	if err := tb.Node(owner).SetLink(false); err != nil {
		return err
	}
	if err := sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	svc, err = tb.Admin.CoreV1().Services(namespace).Get(ctx, "web-dual", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i, c := range clients {
		reqs := c.Stop()
		before := 0
		for _, r := range reqs {
			if r.Start.Before(down) && r.OK() {
				before++
			}
		}
		outage, stray, ok := traffic.Outage(reqs, down)
		if !ok {
			fmt.Printf("  %-18s traffic did not recover within 3 s\n", addrs[i])
			continue
		}
		fmt.Printf("  %-18s %d requests answered before; after the link went down, answered again after %v (stray losses later: %d)\n",
			addrs[i], before, outage.Round(time.Millisecond), stray)
	}
	fmt.Printf("  web-dual is now announced by %s.\n", svc.Annotations[annotation.Announcer])
	step("Done. Removing everything the demo created")
	return nil
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
