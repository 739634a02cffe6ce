package iprange

import (
	"errors"
	"fmt"
	"net/netip"
)

// reservedBlock is a block of addresses that no Service can have: no client reaches it
// through a neighbour that answers ARP or NDP for it.
type reservedBlock struct {
	prefix netip.Prefix
	what   string
}

// reserved lists the blocks CheckServiceAddress and CheckServiceRange refuse. Only blocks
// a host never routes to a neighbour are here: 0.0.0.0/8 and 240.0.0.0/4 are unicast on
// Linux, and documentation or private blocks are what test networks use.
var reserved = []reservedBlock{
	{netip.MustParsePrefix("0.0.0.0/32"), "the unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped IPv6"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

func (b reservedBlock) refuse(a netip.Addr) error {
	return fmt.Errorf("%s is %s (%s), never a Service address", a, b.what, b.prefix)
}

// CheckServiceAddress returns an error saying why a cannot be a Service address: it is the
// zero Addr, it has a zone, it is IPv4-mapped IPv6, or it lies in a block no neighbour
// answers for (unspecified, loopback, link-local, multicast, broadcast). A Service's
// status and the announcements on the wire carry no zones, and a mapped address would be
// a second spelling of an IPv4 one, escaping the checks that every address is held once.
func CheckServiceAddress(a netip.Addr) error {
	if err := checkSpelling(a); err != nil {
		return err
	}
	for _, b := range reserved {
		if b.prefix.Contains(a) {
			return b.refuse(a)
		}
	}
	return nil
}

// CheckServiceRange returns an error naming the first address r shares with a reserved
// block (in the order of the list), or nil when every address of r can be
// a Service's. Checking the ends is not enough: 126.0.0.1-128.0.0.1 holds all of loopback.
func CheckServiceRange(r Range) error {
	for _, a := range []netip.Addr{r.First, r.Last} {
		if err := checkSpelling(a); err != nil {
			return err
		}
	}
	for _, b := range reserved {
		if block := FromPrefix(b.prefix); r.Overlaps(block) {
			first := block.First
			if first.Less(r.First) {
				first = r.First
			}
			return b.refuse(first)
		}
	}
	return nil
}

// checkSpelling returns an error if a is not written as a Service address is: the zero
// Addr, one with a zone, or an IPv4-mapped one. Parse checks only this, so that a range
// is refused for what it holds where the caller can say whose range it is.
func checkSpelling(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("no address: a Service address must be set")
	case a.Zone() != "":
		return fmt.Errorf("%s has a zone: a Service address cannot", a)
	case a.Is4In6():
		return fmt.Errorf("%s is IPv4-mapped IPv6, write it as %s", a, a.Unmap())
	}
	return nil
}
