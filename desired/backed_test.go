package desired

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

func TestBackedOf(t *testing.T) {
	cfg, err := config.Parse("cloud-config", []byte(cloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	services := []*v1.Service{
		service("web", "node-a", "198.18.0.70", "fd00:198:18::170"),
		service("outside", "node-a", "198.18.9.9"),
		service("edge", "node-a", "198.18.1.1"),
		service("mine", "node-b", "198.18.0.72"),
		service("unplanned", "", "198.18.0.73"),
	}
	for _, svc := range services {
		if svc.Annotations != nil && svc.Name != "mine" {
			svc.Annotations[annotation.Standbys] = "node-b,node-c"
		}
	}
	requests := parse(services)
	none := func(string) bool { return false }
	addrs := func(bs []Backed) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Addr.String()+"@"+b.Announcer)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		node   string
		labels labels.Set
		down   Down
		want   []string
	}{
		{"first standby", "node-b", nil, none, []string{"198.18.0.70@node-a", "fd00:198:18::170@node-a"}},
		{"first standby, selected by the edge pool", "node-b", labels.Set{"zone": "edge"}, none, []string{"198.18.0.70@node-a", "198.18.1.1@node-a", "fd00:198:18::170@node-a"}},
		{"second standby", "node-c", nil, none, nil},
		{"second standby, the announcer down", "node-c", nil, func(n string) bool { return n == "node-a" }, []string{"198.18.0.70@node-b", "fd00:198:18::170@node-b"}},
		{"the announcer", "node-a", nil, none, nil},
	} {
		got := addrs(BackedOf(tc.node, tc.labels, requests, cfg, tc.down))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: BackedOf(%s) = %v, want %v", tc.name, tc.node, got, tc.want)
		}
	}
	if b := BackedOf("node-b", nil, requests, cfg, none); len(b) == 0 || b[0].Pool.Name != "v4" || !slices.Equal(b[0].Services, []string{"ns/web"}) || b[0].Addr != netip.MustParseAddr("198.18.0.70") {
		t.Errorf("BackedOf(node-b)[0] = %+v, want 198.18.0.70 of pool v4 for ns/web", b)
	}
}
