package netns_test

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

func TestAddHost(t *testing.T) {
	t.Parallel()
	n := netns.ForTest(t, 1)
	a, err := n.AddHost("stranger")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddHost("other")
	if err != nil {
		t.Fatal(err)
	}
	if a.IPv4 != netip.MustParseAddr("198.18.0.240") || b.IPv4 != netip.MustParseAddr("198.18.0.239") {
		t.Errorf("hosts at %s and %s, want 198.18.0.240 and .239", a.IPv4, b.IPv4)
	}
	for _, dst := range []netip.Addr{n.Nodes[0].IPv4, n.Nodes[0].IPv6, b.IPv4, b.IPv6} {
		if err := a.Ping(dst, pingTimeout); err != nil {
			t.Errorf("stranger → %s: %v", dst, err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*netns.Host{a, b} {
		if _, err := os.Stat(h.Path()); !os.IsNotExist(err) {
			t.Errorf("namespace %s after Close: %v, want it gone", h.Name, err)
		}
	}
}
