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
		{netip.MustParseAddr("0.0.0.1"), ""},
		{netip.MustParseAddr("240.0.0.1"), ""},
		{netip.MustParseAddr("255.255.255.254"), ""},
		{netip.MustParseAddr("fe80::1%eth0"), "fe80::1%eth0 has a zone: a Service address cannot"},
		{netip.MustParseAddr("::ffff:198.51.100.1"), "::ffff:198.51.100.1 is IPv4-mapped IPv6, write it as 198.51.100.1"},
		{netip.MustParseAddr("::ffff:198.51.100.1%eth0"), "::ffff:198.51.100.1%eth0 has a zone: a Service address cannot"},
		{netip.Addr{}, "no address: a Service address must be set"},
		{netip.MustParseAddr("0.0.0.0"), "0.0.0.0 is the unspecified address (0.0.0.0/32), never a Service address"},
		{netip.MustParseAddr("127.0.0.53"), "127.0.0.53 is loopback (127.0.0.0/8), never a Service address"},
		{netip.MustParseAddr("169.254.1.1"), "169.254.1.1 is link-local (169.254.0.0/16), never a Service address"},
		{netip.MustParseAddr("239.255.255.250"), "239.255.255.250 is multicast (224.0.0.0/4), never a Service address"},
		{netip.MustParseAddr("255.255.255.255"), "255.255.255.255 is the broadcast address (255.255.255.255/32), never a Service address"},
		{netip.MustParseAddr("::"), ":: is the unspecified address (::/128), never a Service address"},
		{netip.MustParseAddr("::1"), "::1 is loopback (::1/128), never a Service address"},
		{netip.MustParseAddr("fe80::1"), "fe80::1 is link-local (fe80::/10), never a Service address"},
		{netip.MustParseAddr("ff02::1:ff00:1"), "ff02::1:ff00:1 is multicast (ff00::/8), never a Service address"},
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

// TestCheckServiceRange checks that a range is refused for any address inside it, not
// only for its ends, and that ranges next to a reserved block are not.
func TestCheckServiceRange(t *testing.T) {
	for _, tc := range []struct {
		r    string
		want string // empty for no error
	}{
		{"198.51.100.0/24", ""},
		{"2001:db8::/32", ""},
		{"126.0.0.0-126.255.255.255", ""},
		{"128.0.0.0-169.253.255.255", ""},
		{"240.0.0.0-255.255.255.254", ""},
		{"::2-::ffff:ffff", ""},
		{"::1:0:0:0-fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"0.0.0.0/0", "0.0.0.0 is the unspecified address (0.0.0.0/32), never a Service address"},
		{"0.0.0.1-223.255.255.255", "127.0.0.0 is loopback (127.0.0.0/8), never a Service address"},
		{"126.0.0.1-128.0.0.1", "127.0.0.0 is loopback (127.0.0.0/8), never a Service address"},
		{"169.254.10.0/24", "169.254.10.0 is link-local (169.254.0.0/16), never a Service address"},
		{"223.255.255.0-224.0.0.10", "224.0.0.0 is multicast (224.0.0.0/4), never a Service address"},
		{"240.0.0.0/4", "255.255.255.255 is the broadcast address (255.255.255.255/32), never a Service address"},
		{"::/0", ":: is the unspecified address (::/128), never a Service address"},
		{"::1/128", "::1 is loopback (::1/128), never a Service address"},
		{"::2-::1:0:0:0", "::ffff:0.0.0.0 is IPv4-mapped IPv6 (::ffff:0.0.0.0/96), never a Service address"},
		{"fe00::/7", "fe80:: is link-local (fe80::/10), never a Service address"},
		{"ff02::/16", "ff02:: is multicast (ff00::/8), never a Service address"},
	} {
		r, err := Parse(tc.r)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.r, err)
		}
		got := ""
		if err := CheckServiceRange(r); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckServiceRange(%s) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
