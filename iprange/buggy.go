package iprange

import "net/netip"

// IsBuggyIPv4 reports whether a is an IPv4 address ending in .0 or .255. Some clients'
// firmware takes such an address for a network or broadcast address whatever the prefix
// length, and drops traffic to it; a pool with avoidBuggyIPs never hands these out. An
// IPv6 address is never buggy in this sense.
func IsBuggyIPv4(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// BuggyIPv4Count returns how many addresses of r IsBuggyIPv4 reports, without enumerating
// them: 0 for an IPv6 range.
func (r Range) BuggyIPv4Count() int64 {
	if !r.Is4() {
		return 0
	}
	_, first := split(r.First)
	_, last := split(r.Last)
	// upTo counts the x in [0, n] with x%256 == rem.
	upTo := func(n, rem int64) int64 {
		if n < rem {
			return 0
		}
		return (n-rem)/256 + 1
	}
	var count int64
	for _, rem := range [2]int64{0, 255} {
		count += upTo(int64(last), rem) - upTo(int64(first)-1, rem)
	}
	return count
}
