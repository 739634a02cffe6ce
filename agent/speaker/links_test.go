package speaker

import (
	"net"
	"net/netip"
	"slices"
	"testing"
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
