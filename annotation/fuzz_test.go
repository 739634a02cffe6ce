package annotation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// FuzzParse checks that Parse takes any annotations, refuses what is over a limit, and
// never returns an error that quotes more than the start of a value.
func FuzzParse(f *testing.F) {
	for _, seed := range [][5]string{
		{"198.51.100.7, 2001:db8::7", "web", "team-b", "edge-1,edge-2", "node-a"},
		{"198.51.100.7,banana", "", "Bad_NS", "node-a,-nope-", "Node_A"},
		{"198.51.100.7,", " web ", " team-a, team-a ", "b, a,b", "node-a,node-b"},
		{"fe80::1%eth0", "k", "", ",node-b,,", ""},
		{"2001:db8::1", "", "team-b", strings.Repeat("n,", 100), strings.Repeat("a", 254)},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4])
	}
	f.Fuzz(func(t *testing.T, ips, key, namespaces, nodes, announcer string) {
		svc := service("web", v1.IPFamilyPolicyPreferDualStack, v1.IPv4Protocol, v1.IPv6Protocol)
		for k, v := range map[string]string{IPs: ips, AllowSharedIP: key, SharedIPNamespaces: namespaces,
			PreferredNodes: nodes, Standbys: nodes, Announcer: announcer} {
			svc.Annotations[k] = v
		}
		r, err := Parse(svc)
		if r == nil {
			t.Fatal("no request")
		}
		if len(r.PreferredNodes) > MaxListItems || len(r.Standbys) > MaxListItems || len(r.SharingNamespaces) > MaxListItems+1 || len(r.Addresses) > 2 {
			t.Errorf("request over the limits: %+v", r)
		}
		if err != nil && len(err.Error()) > 6*(maxQuoted*4+600) {
			t.Errorf("error of %d bytes", len(err.Error()))
		}
	})
}
