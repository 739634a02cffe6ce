package iprange

import (
	"net/netip"
	"testing"
)

func TestIsBuggyIPv4(t *testing.T) {
	for addr, want := range map[string]bool{
		"198.51.100.0": true, "198.51.100.255": true, "0.0.0.0": true, "255.255.255.255": true,
		"198.51.100.1": false, "198.51.100.254": false, "10.0.255.1": false,
		"2001:db8::": false, "2001:db8::ff": false, "::ffff:198.51.100.0": false,
	} {
		if got := IsBuggyIPv4(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IsBuggyIPv4(%s) = %v, want %v", addr, got, want)
		}
	}
}

// BuggyIPv4Count must agree with IsBuggyIPv4 on every address of ranges around the edges.
func TestBuggyIPv4Count(t *testing.T) {
	for _, s := range []string{
		"198.51.100.0/32", "198.51.100.1/32", "198.51.100.255/32", "198.51.100.0/24",
		"198.51.100.254-198.51.101.1", "198.51.100.1-198.51.100.254", "198.51.100.255-198.51.102.0",
		"0.0.0.0/22", "255.255.252.0/22", "10.0.0.7-10.0.3.200",
	} {
		r, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for a := r.First; ; a = a.Next() {
			if IsBuggyIPv4(a) {
				want++
			}
			if a == r.Last {
				break
			}
		}
		if got := r.BuggyIPv4Count(); got != want {
			t.Errorf("%s.BuggyIPv4Count() = %d, want %d", s, got, want)
		}
	}
	for s, want := range map[string]int64{"0.0.0.0/0": 1 << 25, "2001:db8::/64": 0} {
		r, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.BuggyIPv4Count(); got != want {
			t.Errorf("%s.BuggyIPv4Count() = %d, want %d", s, got, want)
		}
	}
}
