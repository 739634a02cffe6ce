package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
)

// TestListOverItsLimitIsRefused checks that a list annotation over its limit gets the
// Service no address, and a Warning event naming the key, the limit and the size, which
// quotes only the start of the value.
func TestListOverItsLimitIsRefused(t *testing.T) {
	names := make([]string, 50_000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	svc.Annotations[annotation.PreferredNodes] = strings.Join(names, ",")
	lb, rec := newTestLB(t, svc)
	if _, err := lb.EnsureLoadBalancer(context.Background(), "c", svc, nil); err == nil {
		t.Fatal("a Service with 50,000 preferred nodes got an address")
	}
	size := len(svc.Annotations[annotation.PreferredNodes])
	got := events(rec)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonInvalidRequest+" "+annotation.PreferredNodes+`="node-0,`) ||
		!strings.Contains(got[0], fmt.Sprintf("…(%d bytes)\": %d bytes, more than the limit of %d", size, size, annotation.MaxValueBytes)) || len(got[0]) > 300 {
		t.Errorf("events = %.400q, want one Warning %s naming the key, the limit and the size", got, ReasonInvalidRequest)
	}
}
