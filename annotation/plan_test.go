package annotation

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestPlan checks the order in which nodes announce a Service's addresses: the announcer,
// then each standby once, as the ccm wrote them.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name                string
		announcer, standbys string
		want                []string
	}{
		{"announcer alone", "node-a", "", []string{"node-a"}},
		{"standbys in their order", "node-a", "node-c, node-b", []string{"node-a", "node-c", "node-b"}},
		{"the announcer among its standbys counts once", "node-a", "node-b,node-a,node-b", []string{"node-a", "node-b"}},
		{"no announcer: no plan, whatever the standbys", "", "node-b", nil},
		{"blank entries are skipped", " node-a ", ",node-b,,", []string{"node-a", "node-b"}},
	} {
		svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
		svc.Annotations[Announcer] = tc.announcer
		svc.Annotations[Standbys] = tc.standbys
		r, err := Parse(svc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := r.Plan(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Plan() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBadStandbys checks that a standbys annotation that is not a list of node names is
// reported, and yields no standby: an agent must never take an address for a name that
// is no node's.
func TestBadStandbys(t *testing.T) {
	svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	svc.Annotations[Announcer] = "node-a"
	svc.Annotations[Standbys] = "node-b,Node_C"
	r, err := Parse(svc)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != Standbys || !strings.Contains(fe.Reason, `"Node_C" is not a valid name`) {
		t.Fatalf("Parse = %v, want a FieldError of %s naming Node_C", err, Standbys)
	}
	if r == nil || r.Announcer != "node-a" || len(r.Standbys) != 0 {
		t.Errorf("request %+v, want the announcer kept and no standbys", r)
	}
	if got := r.Plan(); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("Plan() = %q, want the announcer alone", got)
	}
}

func TestStandbysIsTheCCMs(t *testing.T) {
	for _, s := range Specs {
		if s.Key == Standbys {
			if s.WrittenBy != "ccm" {
				t.Errorf("%s written by %q, want ccm", s.Key, s.WrittenBy)
			}
			return
		}
	}
	t.Errorf("Specs lacks %s", Standbys)
}
