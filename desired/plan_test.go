package desired

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// downSet is a Down that takes the named nodes for down.
func downSet(nodes ...string) Down {
	return func(n string) bool { return slices.Contains(nodes, n) }
}

// planned is a Service announced by the plan's first node, with the rest as standbys.
func planned(name string, plan []string, ips ...string) *v1.Service {
	svc := service(name, plan[0], ips...)
	if len(plan) > 1 {
		svc.Annotations[annotation.Standbys] = strings.Join(plan[1:], ",")
	}
	return svc
}

func TestAnnouncer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		announcer string
		standbys  string
		down      []string
		want      string
		covers    []string
	}{
		{"nobody down: the announcer", "a", "b,c", nil, "a", nil},
		{"announcer down: the first standby", "a", "b,c", []string{"a"}, "b", []string{"a"}},
		{"announcer and first standby down: the second", "a", "b,c", []string{"b", "a"}, "c", []string{"a", "b"}},
		{"a standby down changes nothing", "a", "b,c", []string{"b"}, "a", nil},
		{"every node down: nobody", "a", "b,c", []string{"a", "b", "c"}, "", nil},
		{"no standbys, announcer down: nobody", "a", "", []string{"a"}, "", nil},
		{"standbys without an announcer: nobody", "", "b,c", nil, "", nil},
		{"the announcer among its standbys counts once", "a", "a, b", []string{"a"}, "b", []string{"a"}},
	} {
		svc := service("web", tc.announcer, "198.18.0.65")
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[annotation.Standbys] = tc.standbys
		r, err := annotation.Parse(svc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, covers := Announcer(r, downSet(tc.down...))
		if got != tc.want || !slices.Equal(covers, tc.covers) {
			t.Errorf("%s: Announcer = %q covering %v, want %q covering %v", tc.name, got, covers, tc.want, tc.covers)
		}
	}
}

func TestComputeWithDownNodes(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	nodePort := planned("nodeport", []string{"node-a", "node-b"}, "198.18.0.70")
	nodePort.Spec.Type = v1.ServiceTypeNodePort
	services := []*v1.Service{
		planned("web", []string{"node-a", "node-b", "node-c"}, "198.18.0.65"),
		// Two Services of one address, with plans through node-b from two announcers (the
		// ccm writes one plan to both; one edited by hand): shared-1's, the first by name,
		// decides, so that the address has one announcer.
		planned("shared-1", []string{"node-a", "node-b"}, "198.18.0.66"),
		planned("shared-2", []string{"node-c", "node-b"}, "198.18.0.66"),
		planned("other", []string{"node-c", "node-a"}, "198.18.0.67"),
		nodePort,
	}
	addr := func(ip string, covers []string, svcs ...string) Address {
		return Address{Addr: netip.MustParseAddr(ip), Pool: &cfg.Pools[0], Services: svcs, Covers: covers}
	}
	for _, tc := range []struct {
		name    string
		node    string
		down    []string
		want    []Address
		refused []Refusal
	}{
		{"nobody down: the announcer's own", "node-a", nil,
			[]Address{addr("198.18.0.65", nil, "ns/web"), addr("198.18.0.66", nil, "ns/shared-1", "ns/shared-2")},
			[]Refusal{{Service: "ns/nodeport", Reason: NotLoadBalancer}}},
		{"nobody down: the announcer of another plan of a shared address does not announce it", "node-c", nil,
			[]Address{addr("198.18.0.67", nil, "ns/other")}, nil},
		{"nobody down: a standby announces nothing", "node-b", nil, nil, nil},
		{"the announcer down announces nothing", "node-a", []string{"node-a"}, nil, nil},
		{"announcer down: its first standby takes over, covering it", "node-b", []string{"node-a"},
			[]Address{addr("198.18.0.65", []string{"node-a"}, "ns/web"), addr("198.18.0.66", []string{"node-a"}, "ns/shared-1", "ns/shared-2")},
			[]Refusal{{Service: "ns/nodeport", Reason: NotLoadBalancer}}},
		{"both announcers of a shared address down: shared-1's plan decides", "node-b", []string{"node-c", "node-a"},
			[]Address{addr("198.18.0.65", []string{"node-a"}, "ns/web"), addr("198.18.0.66", []string{"node-a"}, "ns/shared-1", "ns/shared-2")},
			[]Refusal{{Service: "ns/nodeport", Reason: NotLoadBalancer}}},
		// shared-1's plan has no live node left: one plan per address, so shared-2's does
		// not step in.
		{"two down ahead: the second standby, covering both", "node-c", []string{"node-a", "node-b"},
			[]Address{addr("198.18.0.65", []string{"node-a", "node-b"}, "ns/web"), addr("198.18.0.67", nil, "ns/other")},
			nil},
	} {
		addrs, refused := Compute(tc.node, nil, services, cfg, downSet(tc.down...))
		if len(addrs) == 0 && len(tc.want) == 0 {
			addrs = nil
		}
		if !reflect.DeepEqual(addrs, tc.want) {
			t.Errorf("%s: addresses\n got %+v\nwant %+v", tc.name, addrs, tc.want)
		}
		if !reflect.DeepEqual(refused, tc.refused) {
			t.Errorf("%s: refused %+v, want %+v", tc.name, refused, tc.refused)
		}
	}
}

// TestPeers checks which nodes an agent checks while no ccm is heard: the other nodes of
// every plan it is in, whose addresses it takes or which take its own.
func TestPeers(t *testing.T) {
	unannounced := planned("pending", []string{"node-x", "node-b"}) // no address yet
	services := []*v1.Service{
		planned("web", []string{"node-a", "node-b", "node-c"}, "198.18.0.65"),
		planned("api", []string{"node-c", "node-a"}, "198.18.0.66"),
		planned("again", []string{"node-a", "node-c"}, "198.18.0.67"),
		planned("alone", []string{"node-d"}, "198.18.0.68"),
		unannounced,
	}
	for node, want := range map[string][]string{
		"node-a": {"node-b", "node-c"},
		"node-b": {"node-a", "node-c"},
		"node-c": {"node-a", "node-b"},
		"node-d": nil,
		"node-x": nil,
		"node-z": nil,
	} {
		if got := Peers(node, services); !slices.Equal(got, want) {
			t.Errorf("Peers(%s) = %v, want %v", node, got, want)
		}
	}
	// The Services' annotations are read, not changed.
	if got := services[0].Annotations[annotation.Standbys]; got != "node-b,node-c" {
		t.Errorf("standbys annotation now %q", got)
	}
}
