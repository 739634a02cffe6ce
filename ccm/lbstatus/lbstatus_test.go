package lbstatus

import (
	"net/netip"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/annotation"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

type fakeAllocator struct {
	cfg     *config.Config
	holders map[string][]string
}

func (f fakeAllocator) Holders(a netip.Addr) []string { return f.holders[a.String()] }
func (f fakeAllocator) Config() *config.Config        { return f.cfg }

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// TestLie checks when a status that differs from what the Service held is reported: an
// address someone else holds, a free one, or a missing one is; one the allocator took
// away with its pool, or gives for the first time, is not (the provider says so itself).
func TestLie(t *testing.T) {
	cfg, err := config.Parse("test", []byte("pools:\n- name: p\n  addresses: [198.51.100.0/28]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{alloc: fakeAllocator{cfg: cfg, holders: map[string][]string{
		"198.51.100.1": {"ns/holder"},
		"198.51.100.2": {"ns/web"},
	}}}
	for _, tc := range []struct {
		name    string
		ingress []netip.Addr
		bad     []string
		held    []netip.Addr
		want    string
	}{
		{"true", addrs("198.51.100.2"), nil, addrs("198.51.100.2"), ""},
		{"another's address", addrs("198.51.100.1"), nil, addrs("198.51.100.2"),
			"listed 198.51.100.1, which ns/holder holds and lacked 198.51.100.2"},
		{"a free address", addrs("198.51.100.9"), nil, nil, "listed 198.51.100.9, which this Service does not hold"},
		{"an entry that is no address", nil, []string{"lb.example"}, nil, "listed lb.example"},
		{"an address removed", nil, nil, addrs("198.51.100.2"), "lacked 198.51.100.2, which this Service holds"},
		{"an address whose pool is gone", addrs("192.0.2.1"), nil, nil, ""},
		{"a first address, not yet written", nil, nil, nil, ""},
	} {
		r := &annotation.Request{Service: "ns/web", Ingress: tc.ingress, BadIngress: tc.bad}
		if got := c.lie(r, tc.held); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
