package annotation

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func shared(ns, key, others string) *v1.Service {
	svc := service("s", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	svc.Namespace = ns
	svc.Annotations[AllowSharedIP] = key
	if others != "" {
		svc.Annotations[SharedIPNamespaces] = others
	}
	return svc
}

// TestSharingStaysInTheNamespace checks that a key means the same group only within one
// namespace, unless both namespaces name each other.
func TestSharingStaysInTheNamespace(t *testing.T) {
	group := func(svc *v1.Service) string {
		t.Helper()
		r, err := Parse(svc)
		if err != nil {
			t.Fatal(err)
		}
		return r.SharingGroup()
	}
	a, b := group(shared("team-a", " web ", "")), group(shared("team-b", "web", ""))
	if a == b || a != "team-a/web" || b != "team-b/web" {
		t.Errorf("team-a/web and team-b/web: groups %q and %q, want team-a/web and team-b/web", a, b)
	}
	// One side opting in is not enough.
	if oneSide := group(shared("team-b", "web", "team-a")); oneSide == a {
		t.Errorf("team-b naming team-a joined team-a's group %q without team-a naming team-b", oneSide)
	}
	both1, both2 := group(shared("team-a", "web", "team-b")), group(shared("team-b", "web", " team-a, team-a "))
	if both1 != both2 || both1 != "team-a,team-b/web" {
		t.Errorf("both opted in: groups %q and %q, want team-a,team-b/web for both", both1, both2)
	}
	// A third namespace that names both is a group of its own, with neither.
	if third := group(shared("team-c", "web", "team-a,team-b")); third == both1 {
		t.Errorf("team-c joined %q", third)
	}
	if r, _ := Parse(service("alone", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)); r.SharingGroup() != "" || r.Group() != "service/ns/alone" {
		t.Errorf("a Service without a key: sharing group %q, group %q", r.SharingGroup(), r.Group())
	}
}

// TestParseReportsEveryProblemAndKeepsTheRest checks that every bad field is reported at
// once, and that what could be read is still returned: the restore after a restart keeps a
// Service's sharing even when its ips annotation went bad.
func TestParseReportsEveryProblemAndKeepsTheRest(t *testing.T) {
	svc := shared("team-a", "web", "Bad_NS")
	svc.Annotations[IPs] = "banana"
	svc.Annotations[PreferredNodes] = "node-a,-nope-"
	r, err := Parse(svc)
	var problems []string
	for _, e := range unwrap(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("%v is not a *FieldError", e)
			continue
		}
		problems = append(problems, fe.Field)
	}
	if want := []string{IPs, SharedIPNamespaces, PreferredNodes}; !slices.Equal(problems, want) {
		t.Errorf("problems in %v, want %v: %v", problems, want, err)
	}
	if r.SharingGroup() != "team-a/web" {
		t.Errorf("sharing group %q, want team-a/web kept within its namespace", r.SharingGroup())
	}
	if !strings.Contains(err.Error(), `"Bad_NS" is not a valid name`) {
		t.Errorf("error does not name the bad namespace: %v", err)
	}

	lonely := service("x", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	lonely.Annotations[SharedIPNamespaces] = "team-b"
	if _, err := Parse(lonely); err == nil || !strings.Contains(err.Error(), "has no lb.baremetal.io/allow-shared-ip key") {
		t.Errorf("namespaces without a key: %v", err)
	}
}

func unwrap(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestOwnershipAndStatus(t *testing.T) {
	svc := service("x", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}, {IP: "fe80::1%eth0"}, {Hostname: "lb.example"}, {IP: "::ffff:198.51.100.2"}}
	svc.Annotations[Announcer] = "node-a"
	svc.Annotations[PreferredNodes] = "b, a,b"
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	r, err := Parse(svc)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Announced() || r.Announcer != "node-a" || !r.Local || !slices.Equal(r.PreferredNodes, []string{"b", "a"}) {
		t.Errorf("request %+v", r)
	}
	if len(r.Ingress) != 1 || r.Ingress[0].String() != "198.51.100.1" || !slices.Equal(r.BadIngress, []string{"fe80::1%eth0", "lb.example", "::ffff:198.51.100.2"}) {
		t.Errorf("ingress %v, bad %v", r.Ingress, r.BadIngress)
	}
	svc.DeletionTimestamp = ptr.To(metav1.Now())
	if r, _ := Parse(svc); r.Announced() {
		t.Error("a Service being deleted is announced")
	}
	svc.DeletionTimestamp = nil
	svc.Spec.LoadBalancerClass = ptr.To("other.example/lb")
	if r, _ := Parse(svc); r.Ours() || r.Ownership != OtherClass || r.Announced() {
		t.Errorf("loadBalancerClass: ownership %q", r.Ownership)
	}
	svc.Spec.LoadBalancerClass = nil
	svc.Spec.Type = v1.ServiceTypeClusterIP
	if r, _ := Parse(svc); r.Ownership != NotLoadBalancer {
		t.Errorf("ClusterIP: ownership %q", r.Ownership)
	}
}

// TestDocsDocumentEveryAnnotation keeps the configuration reference and Specs together.
func TestDocsDocumentEveryAnnotation(t *testing.T) {
	const page = "../docs/configuration.md"
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Specs {
		if !strings.Contains(string(doc), "`"+s.Key+"`") {
			t.Errorf("%s does not document %s", page, s.Key)
		}
	}
}
