package iprange

import (
	"net/netip"
	"testing"
)

func TestCheckServiceAddress(t *testing.T) {
	for _, tc := range []struct {
		addr netip.Addr
		want string // empty for no error
	}{
		{netip.MustParseAddr("198.51.100.1"), ""},
		{netip.MustParseAddr("2001:db8::1"), ""},
		{netip.MustParseAddr("fe80::1"), ""},
		{netip.MustParseAddr("fe80::1%eth0"), "fe80::1%eth0 has a zone: a Service address cannot"},
		{netip.MustParseAddr("::ffff:198.51.100.1"), "::ffff:198.51.100.1 is IPv4-mapped IPv6, write it as 198.51.100.1"},
		{netip.MustParseAddr("::ffff:198.51.100.1%eth0"), "::ffff:198.51.100.1%eth0 has a zone: a Service address cannot"},
		{netip.Addr{}, "no address: a Service address must be set"},
	} {
		err := CheckServiceAddress(tc.addr)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckServiceAddress(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
