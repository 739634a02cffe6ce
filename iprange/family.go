package iprange

import "net/netip"

// Family is an IP address family. It is the one representation of a family in the
// project; the values index arrays kept per family.
type Family uint8

// The address families.
const (
	IPv4 Family = iota
	IPv6
)

// String returns "IPv4" or "IPv6", as in metrics labels and messages.
func (f Family) String() string {
	if f == IPv4 {
		return "IPv4"
	}
	return "IPv6"
}

// FamilyOf returns the family of a. An IPv4-mapped IPv6 address is IPv6: no Service
// address is one, and every parser of the project refuses them.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Family returns the family of r's addresses.
func (r Range) Family() Family { return FamilyOf(r.First) }
