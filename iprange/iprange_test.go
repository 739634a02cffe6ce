package iprange

import (
	"math/big"
	"net/netip"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in          string
		first, last string
		size        string
		str         string
	}{
		{"198.51.100.0/24", "198.51.100.0", "198.51.100.255", "256", "198.51.100.0/24"},
		{" 198.51.100.10 - 198.51.100.50 ", "198.51.100.10", "198.51.100.50", "41", "198.51.100.10-198.51.100.50"},
		{"198.51.100.7/32", "198.51.100.7", "198.51.100.7", "1", "198.51.100.7"},
		{"198.51.100.8-198.51.100.15", "198.51.100.8", "198.51.100.15", "8", "198.51.100.8/29"},
		{"0.0.0.0/0", "0.0.0.0", "255.255.255.255", "4294967296", "0.0.0.0/0"},
		{"2001:db8::/64", "2001:db8::", "2001:db8::ffff:ffff:ffff:ffff", "18446744073709551616", "2001:db8::/64"},
		{"2001:db8::/48", "2001:db8::", "2001:db8:0:ffff:ffff:ffff:ffff:ffff", "1208925819614629174706176", "2001:db8::/48"},
		{"2001:db8::/127", "2001:db8::", "2001:db8::1", "2", "2001:db8::/127"},
		{"::/0", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "340282366920938463463374607431768211456", "::/0"},
		{"2001:db8::10-2001:db8::1:0", "2001:db8::10", "2001:db8::1:0", "65521", "2001:db8::10-2001:db8::1:0"},
	}
	for _, tc := range tests {
		r, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if r.First != netip.MustParseAddr(tc.first) || r.Last != netip.MustParseAddr(tc.last) {
			t.Errorf("Parse(%q) = %v-%v, want %s-%s", tc.in, r.First, r.Last, tc.first, tc.last)
		}
		want, _ := new(big.Int).SetString(tc.size, 10)
		if r.Size().Cmp(want) != 0 {
			t.Errorf("Parse(%q).Size() = %v, want %s", tc.in, r.Size(), tc.size)
		}
		if r.String() != tc.str {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, r.String(), tc.str)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"198.51.100.1", `"198.51.100.1" is neither a CIDR (198.51.100.0/24) nor a range (198.51.100.10-198.51.100.50)`},
		{"198.51.100.0/33", `invalid CIDR "198.51.100.0/33": netip.ParsePrefix("198.51.100.0/33"): prefix length out of range`},
		{"198.51.100.1/24", `invalid CIDR "198.51.100.1/24": host bits are set, did you mean 198.51.100.0/24?`},
		{"fe80::1%eth0/64", `invalid CIDR "fe80::1%eth0/64": netip.ParsePrefix("fe80::1%eth0/64"): IPv6 zones cannot be present in a prefix`},
		{"::ffff:198.51.100.0/120", `invalid CIDR "::ffff:198.51.100.0/120": IPv4-mapped IPv6, write it as 198.51.100.0/24`},
		{"::ffff:0:0/95", `invalid CIDR "::ffff:0:0/95": ::ffff:0.0.0.0 is IPv4-mapped IPv6, write it as 0.0.0.0`},
		{"198.51.100.50-198.51.100.10", `invalid range 198.51.100.50-198.51.100.10: end comes before start`},
		{"198.51.100.1-2001:db8::1", `invalid range 198.51.100.1-2001:db8::1: mixes IPv4 and IPv6`},
		{"198.51.100.x-198.51.100.2", `invalid range start "198.51.100.x": ParseAddr("198.51.100.x"): unexpected character (at "x")`},
		{"198.51.100.1-", `invalid range end "": ParseAddr(""): unable to parse IP`},
		{"fe80::1%eth0-fe80::2", `invalid range fe80::1%eth0-fe80::2: fe80::1%eth0 has a zone: a Service address cannot`},
		{"198.51.100.1-::ffff:198.51.100.2", `invalid range 198.51.100.1-::ffff:198.51.100.2: ::ffff:198.51.100.2 is IPv4-mapped IPv6, write it as 198.51.100.2`},
	}
	for _, tc := range tests {
		_, err := Parse(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) error = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestContainsOverlaps(t *testing.T) {
	r, _ := Parse("198.51.100.10-198.51.100.20")
	for addr, want := range map[string]bool{
		"198.51.100.9": false, "198.51.100.10": true, "198.51.100.20": true, "198.51.100.21": false,
		"::ffff:198.51.100.15": false, "2001:db8::": false,
	} {
		if got := r.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", addr, got, want)
		}
	}
	for other, want := range map[string]bool{
		"198.51.100.0/29": false, "198.51.100.0/28": true, "198.51.100.20-198.51.100.30": true,
		"198.51.100.21-198.51.100.30": false, "198.51.100.12-198.51.100.13": true, "::/0": false,
	} {
		o, err := Parse(other)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Overlaps(o); got != want || o.Overlaps(r) != want {
			t.Errorf("Overlaps(%s) = %v, want %v both ways", other, got, want)
		}
	}
}
