package desired

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

const cloudConfig = `
pools:
  - name: v4
    addresses: [198.18.0.64/26]
  - name: v6
    addresses: ["fd00:198:18::100-fd00:198:18::1ff"]
  - name: edge
    addresses: [198.18.1.0/28]
    nodeSelector:
      matchLabels: {zone: edge}
`

func service(name, announcer string, ips ...string) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer},
	}
	if announcer != "" {
		svc.Annotations = map[string]string{annotation.Announcer: announcer}
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

func TestCompute(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	nodePort := service("nodeport", "node-a", "198.18.0.70")
	nodePort.Spec.Type = v1.ServiceTypeNodePort
	classed := service("classed", "node-a", "198.18.0.71")
	classed.Spec.LoadBalancerClass = ptr.To("example.com/other")
	hostname := service("hostname", "node-a")
	hostname.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{Hostname: "lb.example.com"}}

	services := []*v1.Service{
		service("dual", "node-a", "198.18.0.65", "fd00:198:18::100"),
		service("shared-1", "node-a", "198.18.0.66"),
		service("shared-2", "node-a", "198.18.0.66"),
		service("elsewhere", "node-b", "198.18.0.67"),
		service("nobody", "", "198.18.0.68"),
		service("pending", "node-a"),
		service("outside", "node-a", "192.0.2.1", "198.18.0.69"),
		service("garbage", "node-a", "198.18.0.300"),
		service("mapped", "node-a", "::ffff:198.18.0.72"),
		service("edge", "node-a", "198.18.1.1"),
		nodePort, classed, hostname,
	}
	wantAddrs := []Address{
		{Addr: netip.MustParseAddr("198.18.0.65"), Pool: &cfg.Pools[0], Services: []string{"ns/dual"}},
		{Addr: netip.MustParseAddr("198.18.0.66"), Pool: &cfg.Pools[0], Services: []string{"ns/shared-1", "ns/shared-2"}},
		{Addr: netip.MustParseAddr("198.18.0.69"), Pool: &cfg.Pools[0], Services: []string{"ns/outside"}},
		{Addr: netip.MustParseAddr("fd00:198:18::100"), Pool: &cfg.Pools[1], Services: []string{"ns/dual"}},
	}
	wantRefused := []Refusal{
		{Service: "ns/classed", Reason: OtherClass},
		{Service: "ns/edge", Address: "198.18.1.1", Reason: NodeNotSelected},
		{Service: "ns/garbage", Address: "198.18.0.300", Reason: NotAnAddress},
		{Service: "ns/hostname", Address: "lb.example.com", Reason: NotAnAddress},
		// An IPv4-mapped address is no Service address: the ccm never writes one.
		{Service: "ns/mapped", Address: "::ffff:198.18.0.72", Reason: NotAnAddress},
		{Service: "ns/nodeport", Reason: NotLoadBalancer},
		{Service: "ns/outside", Address: "192.0.2.1", Reason: NotInPool},
	}
	// The input order must not matter.
	for range 20 {
		rand.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		addrs, refused := Compute("node-a", labels.Set{"zone": "core"}, services, cfg, nobodyDown)
		if !reflect.DeepEqual(addrs, wantAddrs) {
			t.Fatalf("addresses:\n got %+v\nwant %+v", addrs, wantAddrs)
		}
		if !reflect.DeepEqual(refused, wantRefused) {
			t.Fatalf("refused:\n got %+v\nwant %+v", refused, wantRefused)
		}
	}

	if addrs, refused := Compute("node-c", nil, services, cfg, nobodyDown); len(addrs) != 0 || len(refused) != 0 {
		t.Errorf("node-c is named by nobody, got %v and %v", addrs, refused)
	}
	// The edge pool's addresses are announced by the nodes its nodeSelector selects.
	addrs, refused := Compute("node-a", labels.Set{"zone": "edge"}, services, cfg, nobodyDown)
	if !slices.ContainsFunc(addrs, func(a Address) bool { return a.Addr.String() == "198.18.1.1" }) ||
		slices.ContainsFunc(refused, func(r Refusal) bool { return r.Reason == NodeNotSelected }) {
		t.Errorf("an edge node: addresses %v, refused %v; want 198.18.1.1 announced", addrs, refused)
	}
	// An empty node name must never match a Service without an announcer.
	if addrs, _ := Compute("", nil, services, cfg, nobodyDown); len(addrs) != 0 {
		t.Errorf("empty node name got %v", addrs)
	}
}

// nobodyDown is the Down of a cluster where every agent answers.
func nobodyDown(string) bool { return false }

func TestRefusalString(t *testing.T) {
	for r, want := range map[Refusal]string{
		{Service: "ns/a", Address: "192.0.2.1", Reason: NotInPool}:        "192.0.2.1 of ns/a is outside every pool of the cloud-config",
		{Service: "ns/a", Address: "x", Reason: NotAnAddress}:             "x of ns/a is not an IP address",
		{Service: "ns/a", Reason: NotLoadBalancer}:                        "ns/a is not of type LoadBalancer",
		{Service: "ns/a", Reason: OtherClass}:                             "ns/a has a loadBalancerClass: another load balancer owns it",
		{Service: "ns/a", Address: "198.18.1.1", Reason: NodeNotSelected}: "198.18.1.1 of ns/a is in a pool whose nodeSelector does not select this node",
	} {
		if got := r.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", r, got, want)
		}
	}
}

// TestAssignmentsAgreeWithCompute checks that the ccm's view of every node's duty is what
// each node computes for itself, with a verdict and refusals among the Services.
func TestAssignmentsAgreeWithCompute(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	var services []*v1.Service
	for i, plan := range [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"a"}, {"d", "a"}} {
		svc := service(fmt.Sprintf("s%d", i), plan[0], fmt.Sprintf("198.18.0.%d", 70+i))
		if len(plan) > 1 {
			svc.Annotations[annotation.Standbys] = strings.Join(plan[1:], ",")
		}
		services = append(services, svc)
	}
	// Refused: outside every pool, in a pool that selects no node here, not ours.
	nodePort := service("nodeport", "a", "198.18.0.90")
	nodePort.Spec.Type = v1.ServiceTypeNodePort
	services = append(services, service("outside", "a", "203.0.113.1"), service("edge", "c", "198.18.1.1"), nodePort)
	down := func(n string) bool { return n == "b" || n == "d" }
	requests := parse(services)
	got := Assignments(requests, cfg, func(string) labels.Set { return nil }, down)
	for _, node := range []string{"a", "b", "c", "d"} {
		addrs, refused := Compute(node, nil, services, cfg, down)
		if node == "a" && len(refused) != 2 || node == "c" && len(refused) != 1 {
			t.Errorf("%s refuses %v", node, refused)
		}
		var want []netip.Addr
		for _, a := range addrs {
			want = append(want, a.Addr)
		}
		if !slices.Equal(got[node], want) {
			t.Errorf("Assignments[%s] = %v, Compute gives %v", node, got[node], want)
		}
		if Digest(addrs) != probe.DigestOf(got[node]) {
			t.Errorf("%s: the digests differ", node)
		}
	}
	if len(got["a"]) != 3 {
		t.Errorf("a is given %v, want its own two and d's", got["a"])
	}
}

func TestConfirmed(t *testing.T) {
	addr := netip.MustParseAddr
	own := []Address{{Addr: addr("198.51.100.1"), Covers: []string{"a"}}, {Addr: addr("198.51.100.2")}, {Addr: addr("fd00::1")}}
	// held: own, and 198.51.100.3, which a stale plan gives to another node.
	held := []Address{{Addr: addr("198.51.100.1")}, {Addr: addr("198.51.100.2")}, {Addr: addr("198.51.100.3"), Covers: []string{"b"}}, {Addr: addr("fd00::1")}}
	got := Confirmed(own, held, []netip.Addr{addr("fd00::1"), addr("198.51.100.9"), addr("::ffff:198.51.100.1"), addr("198.51.100.3")})
	want := []Address{{Addr: addr("198.51.100.1"), Covers: []string{"a"}}, {Addr: addr("198.51.100.3")}, {Addr: addr("fd00::1")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Confirmed = %v, want %v: own's that the duty lists with their covers, the held one it gives this node, nothing unknown", got, want)
	}
	if len(Confirmed(own, held, nil)) != 0 {
		t.Error("an empty duty confirms something")
	}
}

// TestHeld: every address of the cached Services that the pools let the node announce is
// held, whether the plan, which may be stale, names the node or not; one of a pool whose
// nodeSelector leaves the node out is not.
func TestHeld(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	behind := service("behind", "node-b", "198.18.0.70")
	behind.Annotations[annotation.Standbys] = "node-a"
	elsewhere := service("elsewhere", "node-b", "198.18.0.71")
	elsewhere.Annotations[annotation.Standbys] = "node-c"
	edge := service("edge", "node-b", "198.18.1.1")
	requests := parse([]*v1.Service{behind, elsewhere, edge})
	held := Held("node-a", nil, requests, cfg)
	var got []string
	for _, a := range held {
		got = append(got, a.Addr.String()+" "+strings.Join(a.Services, ","))
	}
	if want := []string{"198.18.0.70 ns/behind", "198.18.0.71 ns/elsewhere"}; !slices.Equal(got, want) {
		t.Errorf("Held = %q, want %q: every address of a pool that selects node-a, named in the plan or not", got, want)
	}
	if own, _ := ComputeOf("node-a", nil, requests, cfg, nobodyDown, nil); len(own) != 0 {
		t.Errorf("ComputeOf with every node up = %+v, want nothing: node-b announces", own)
	}
}

// TestCoveredWithdrawsOnlyTheCoverersPlans: an agent a peer says it stands in for, while
// no ccm is heard, withdraws only the addresses of the plans that name that peer. The
// Service whose plan is [node-a, node-t] keeps its announcer: node-t hears node-a answer
// and takes nothing, so withdrawing it too would leave it unanswered.
func TestCoveredWithdrawsOnlyTheCoverersPlans(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	withS := service("with-s", "node-a", "198.18.0.70")
	withS.Annotations[annotation.Standbys] = "node-s"
	withT := service("with-t", "node-a", "198.18.0.71")
	withT.Annotations[annotation.Standbys] = "node-t"
	requests := parse([]*v1.Service{withS, withT})
	own, _ := ComputeOf("node-a", nil, requests, cfg, nobodyDown, []string{"node-s"})
	if len(own) != 1 || own[0].Addr != netip.MustParseAddr("198.18.0.71") {
		t.Errorf("node-a covered by node-s announces %+v, want 198.18.0.71 of ns/with-t alone", own)
	}
	// What node-s computes with node-a taken for down: the address it took, and only that.
	taken, _ := ComputeOf("node-s", nil, requests, cfg, func(n string) bool { return n == "node-a" }, nil)
	if len(taken) != 1 || taken[0].Addr != netip.MustParseAddr("198.18.0.70") {
		t.Errorf("node-s announces %+v, want 198.18.0.70", taken)
	}
}

// TestTolerated: before the tolerance runs out, an agent announces its own view and what
// the duty adds of the addresses whose cached announcer is down or missing; not one whose
// cached announcer lives, which a planned move may have taken from it just before the
// ccm's next duty says so.
func TestTolerated(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	stale := service("stale", "node-x", "198.18.0.70") // node-x died; the ccm chose node-a
	stale.Annotations[annotation.Standbys] = "node-b"
	moved := service("moved", "node-b", "198.18.0.71") // node-a's view is ahead of the duty
	unplanned := service("unplanned", "", "198.18.0.72")
	mine := service("mine", "node-a", "198.18.0.73")
	requests := parse([]*v1.Service{stale, moved, unplanned, mine})
	down := func(n string) bool { return n == "node-x" }
	own, _ := ComputeOf("node-a", nil, requests, cfg, down, nil)
	held := Held("node-a", nil, requests, cfg)
	vacant := Vacant("node-a", requests, down)
	for addr, want := range map[string]bool{"198.18.0.70": true, "198.18.0.71": false, "198.18.0.72": true, "198.18.0.73": true} {
		if got := vacant(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Vacant(%s) = %v, want %v", addr, got, want)
		}
	}
	duty := []netip.Addr{netip.MustParseAddr("198.18.0.70"), netip.MustParseAddr("198.18.0.71"), netip.MustParseAddr("198.18.0.73")}
	out, vacated := Tolerated(own, held, duty, vacant)
	var got, gotVacated []string
	for _, a := range out {
		got = append(got, a.Addr.String())
	}
	for _, a := range vacated {
		gotVacated = append(gotVacated, a.Addr.String())
	}
	if want := []string{"198.18.0.70", "198.18.0.73"}; !slices.Equal(got, want) {
		t.Errorf("Tolerated = %q, want %q: own, and the duty's address whose announcer is down", got, want)
	}
	if want := []string{"198.18.0.70"}; !slices.Equal(gotVacated, want) {
		t.Errorf("Tolerated's vacated = %q, want %q: what it adds to own", gotVacated, want)
	}
	if got, vacated := Tolerated(own, held, nil, vacant); !reflect.DeepEqual(got, own) || vacated != nil {
		t.Errorf("Tolerated with an empty duty = %v, %v, want own %v and nothing vacated: the tolerance guards what the duty leaves out", got, vacated, own)
	}
}
