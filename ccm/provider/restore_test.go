package provider

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// TestRestoreAppliesPoolRules checks that an address in a Service's status is not adopted
// at a restart where Assign would refuse it, with a Warning event naming the rule.
func TestRestoreAppliesPoolRules(t *testing.T) {
	cfg, err := config.Parse("test", []byte(`
pools:
- name: closed
  addresses: [198.51.100.0/30]
  namespaces: [team-a]
- name: open
  addresses: [203.0.113.0/30]
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	refused := withStatus(service("refused", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "198.51.100.1")
	named := withStatus(service("named", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), now, "198.51.100.2")
	named.Annotations[annotation.Pool] = "open"
	lb, rec := newTestLB(t, refused, named)
	lb.setConfig(cfg)
	if err := lb.ready(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"198.51.100.1", "198.51.100.2"} {
		if got := lb.alloc.Holders(netip.MustParseAddr(addr)); len(got) != 0 {
			t.Errorf("%s adopted by %v", addr, got)
		}
	}
	got := strings.Join(events(rec), "\n")
	for _, want := range []string{
		`Warning PoolNotAllowed Address 198.51.100.1 is not kept: pool "closed" does not allow Services in namespace "ns" with these labels (see its namespaces and serviceSelector); this Service gets another address`,
		`Warning AddressNotInPool Address 198.51.100.2 is not kept: address 198.51.100.2 is not in pool "open"; this Service gets another address`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("events lack %q:\n%s", want, got)
		}
	}
}

// TestRestoreOutsidePoolsEventEach checks that 2,000 Services whose addresses no pool
// contains any more each get their event; BenchmarkRestoreOutsidePools (make bench-ipam)
// shows what it costs.
func TestRestoreOutsidePoolsEventEach(t *testing.T) {
	const n = 2_000
	lb, _ := newTestLB(t, outsidePools(n)...)
	rec := record.NewFakeRecorder(n)
	lb.recorder = rec
	if err := lb.ready(); err != nil {
		t.Fatal(err)
	}
	if got := len(events(rec)); got != n {
		t.Errorf("%d events, want one per Service, %d", got, n)
	}
}

// outsidePools returns n Services whose status holds an address no pool contains.
func outsidePools(n int) []*v1.Service {
	services := make([]*v1.Service, n)
	addr := netip.MustParseAddr("10.0.0.0")
	for i := range services {
		services[i] = withStatus(service(fmt.Sprintf("s%d", i), v1.IPFamilyPolicySingleStack, v1.IPv4Protocol), time.Unix(0, 0), addr.String())
		addr = addr.Next()
	}
	return services
}
