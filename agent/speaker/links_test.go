package speaker

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

func TestChoose(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	pfx := netip.MustParsePrefix
	links := []Link{
		{Name: "lo", Up: true, Loopback: true, Subnets: []netip.Prefix{pfx("127.0.0.0/8")}},
		{Name: "eth0", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.0.0/24"), pfx("fd00:198:18::/64")}},
		{Name: "eth1", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.0.0/16")}},
		{Name: "eth2", Up: false, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.0.0/24")}},
		{Name: "kube-ipvs0", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.0.10/32"), pfx("203.0.113.5/32")}},
		{Name: "wg0", Up: true, Subnets: []netip.Prefix{pfx("198.18.0.0/24")}}, // no Ethernet address
		{Name: "vlan7", Up: true, MAC: mac},
	}
	for _, tc := range []struct {
		addr string
		pool []string
		want []string
	}{
		{"198.18.0.10", nil, []string{"eth0", "eth1"}},
		{"198.18.1.10", nil, []string{"eth1"}},
		{"fd00:198:18::10", nil, []string{"eth0"}},
		{"203.0.113.5", nil, nil},                                   // only a host route: nowhere
		{"127.0.0.5", nil, nil},                                     // loopback: never
		{"192.0.2.1", []string{"vlan7", "eth2"}, []string{"vlan7"}}, // pool's interfaces, if up
		{"198.18.0.10", []string{"eth1"}, []string{"eth1"}},         // the pool's choice wins over subnets
		{"198.18.0.10", []string{"missing"}, nil},
	} {
		got := Choose(netip.MustParseAddr(tc.addr), tc.pool, links)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Choose(%s, %v) = %v, want %v", tc.addr, tc.pool, got, tc.want)
		}
	}
}

func TestUnable(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	pfx := netip.MustParsePrefix
	pools := mustPools(t, `pools:
- name: dual
  addresses: [198.18.0.64/26, "fd00:198:18::100-fd00:198:18::1ff"]
- name: v4
  addresses: [198.18.1.0/28]
- name: named
  addresses: [192.0.2.0/28, "2001:db8::/64"]
  interfaces: [bond0]
`)
	both := Link{Name: "eth0", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.0.2/16"), pfx("fd00:198:18::2/64")}}
	bond := Link{Name: "bond0", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("10.0.0.2/24"), pfx("2001:db8::2/64")}}
	for _, tc := range []struct {
		name  string
		links []Link
		want  []string
	}{
		{"every family", []Link{both, bond}, nil},
		{"IPv6 lost", []Link{{Name: "eth0", Up: true, MAC: mac, Subnets: both.Subnets[:1]}, bond},
			[]string{"n1 has no IPv6 address on eth0"}},
		{"link down", []Link{{Name: "eth0", MAC: mac, Subnets: both.Subnets}, bond},
			[]string{"n1 has no up interface for pool dual", "n1 has no up interface for pool dual", "n1 has no up interface for pool v4"}},
		{"named interface without IPv6", []Link{both, {Name: "bond0", Up: true, MAC: mac, Subnets: bond.Subnets[:1]}},
			[]string{"n1 has no IPv6 address on bond0"}},
		{"named interface missing", []Link{both}, []string{"n1 has no up interface for pool named", "n1 has no up interface for pool named"}},
		{"host routes only", []Link{{Name: "kube-ipvs0", Up: true, MAC: mac, Subnets: []netip.Prefix{pfx("198.18.1.1/32")}}, both, bond},
			nil},
	} {
		var got []string
		for _, u := range Unable(pools, tc.links) {
			got = append(got, u.Explain("n1"))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Unable says %q, want %q", tc.name, got, tc.want)
		}
	}
}

func mustPools(t *testing.T, yaml string) []config.Pool {
	t.Helper()
	cfg, err := config.Parse("cloud-config", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Pools
}
