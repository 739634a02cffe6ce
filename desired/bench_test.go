package desired

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// BenchmarkTakeover is the computation of a standby's agent when the node ahead of it in
// the plans of 5,000 Services is taken for down: what each of its syncs costs while the
// ccm's patches of those Services arrive.
func BenchmarkTakeover(b *testing.B) {
	cfg, err := config.Parse("cloud-config", []byte("pools:\n- name: bulk\n  addresses: [198.18.32.0/19]\n"))
	if err != nil {
		b.Fatal(err)
	}
	services := make([]*v1.Service, 5000)
	a := netip.MustParseAddr("198.18.32.0")
	for i := range services {
		services[i] = planned(fmt.Sprintf("bulk-%d", i), []string{"node-a", "node-b", "node-c"}, a.String())
		a = a.Next()
	}
	requests := parse(services)
	down := downSet("node-a")
	b.ReportAllocs()
	for b.Loop() {
		own, _ := ComputeOf("node-b", nil, requests, cfg, down, nil)
		Digest(own)
		if len(own) != len(services) {
			b.Fatalf("node-b takes %d addresses, want %d", len(own), len(services))
		}
	}
}
