// Package iprange holds inclusive ranges of IP addresses, as written in the cloud-config
// ("198.51.100.0/24", "198.51.100.10-198.51.100.50", "2001:db8::/64"), and the arithmetic
// the allocator needs on them. Sizes are exact for every IPv6 range.
package iprange

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"
)

// Range is an inclusive range of addresses of one family: First <= Last.
type Range struct {
	First netip.Addr
	Last  netip.Addr
}

// Parse reads a CIDR ("198.51.100.0/24") or an inclusive range ("198.51.100.10-198.51.100.50").
// A CIDR must not have host bits set; both ends of a range must be of the same family and
// the end must not come before the start. The ends must be written as Service addresses
// are (no zone, not IPv4-mapped); whether every address can be one is CheckServiceRange's
// to say.
func Parse(s string) (Range, error) {
	s = strings.TrimSpace(s)
	if first, last, ok := strings.Cut(s, "-"); ok {
		return parseFirstLast(strings.TrimSpace(first), strings.TrimSpace(last))
	}
	if !strings.Contains(s, "/") {
		return Range{}, fmt.Errorf("%q is neither a CIDR (198.51.100.0/24) nor a range (198.51.100.10-198.51.100.50)", s)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return Range{}, fmt.Errorf("invalid CIDR %q: %w", s, err)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return Range{}, fmt.Errorf("invalid CIDR %q: IPv4-mapped IPv6, write it as %s", s, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96))
	}
	if err := checkSpelling(p.Addr()); err != nil {
		return Range{}, fmt.Errorf("invalid CIDR %q: %w", s, err)
	}
	if p.Masked() != p {
		return Range{}, fmt.Errorf("invalid CIDR %q: host bits are set, did you mean %s?", s, p.Masked())
	}
	return FromPrefix(p), nil
}

func parseFirstLast(first, last string) (Range, error) {
	f, err := netip.ParseAddr(first)
	if err != nil {
		return Range{}, fmt.Errorf("invalid range start %q: %w", first, err)
	}
	l, err := netip.ParseAddr(last)
	if err != nil {
		return Range{}, fmt.Errorf("invalid range end %q: %w", last, err)
	}
	for _, a := range []netip.Addr{f, l} {
		if err := checkSpelling(a); err != nil {
			return Range{}, fmt.Errorf("invalid range %s-%s: %w", first, last, err)
		}
	}
	if f.Is4() != l.Is4() {
		return Range{}, fmt.Errorf("invalid range %s-%s: mixes IPv4 and IPv6", f, l)
	}
	if l.Less(f) {
		return Range{}, fmt.Errorf("invalid range %s-%s: end comes before start", f, l)
	}
	return Range{First: f, Last: l}, nil
}

// FromPrefix returns the range of all addresses in p.
func FromPrefix(p netip.Prefix) Range {
	p = p.Masked()
	first := p.Addr()
	hi, lo := split(first)
	hostBits := first.BitLen() - p.Bits()
	// Set the host bits of the 128-bit value: an IPv4 address lives in the low 32 bits.
	switch {
	case hostBits >= 64:
		lo = ^uint64(0)
		hi |= ^uint64(0) >> (128 - hostBits)
	case hostBits > 0:
		lo |= ^uint64(0) >> (64 - hostBits)
	}
	return Range{First: first, Last: join(hi, lo, first.Is4())}
}

// Is4 reports whether the range holds IPv4 addresses.
func (r Range) Is4() bool { return r.First.Is4() }

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether r and o have an address in common.
func (r Range) Overlaps(o Range) bool {
	return r.Is4() == o.Is4() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// Size returns the number of addresses in r, exactly.
func (r Range) Size() *big.Int {
	n := new(big.Int).Sub(toBig(r.Last), toBig(r.First))
	return n.Add(n, big.NewInt(1))
}

// String writes r as a CIDR when it is one, otherwise as "first-last".
func (r Range) String() string {
	if r.First == r.Last {
		return r.First.String()
	}
	for bits := r.First.BitLen(); bits >= 0; bits-- {
		p := netip.PrefixFrom(r.First, bits)
		if p.Masked().Addr() != r.First {
			break
		}
		if FromPrefix(p) == r {
			return p.String()
		}
	}
	return r.First.String() + "-" + r.Last.String()
}

func toBig(a netip.Addr) *big.Int {
	hi, lo := split(a)
	n := new(big.Int).SetUint64(hi)
	n.Lsh(n, 64)
	return n.Or(n, new(big.Int).SetUint64(lo))
}

// split returns a as a 128-bit number; an IPv4 address is its 32-bit value.
func split(a netip.Addr) (hi, lo uint64) {
	if a.Is4() {
		b := a.As4()
		return 0, uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	}
	b := a.As16()
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[i+8])
	}
	return hi, lo
}

func join(hi, lo uint64, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte{byte(lo >> 24), byte(lo >> 16), byte(lo >> 8), byte(lo)})
	}
	var b [16]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(hi)
		b[i+8] = byte(lo)
		hi >>= 8
		lo >>= 8
	}
	return netip.AddrFrom16(b)
}
