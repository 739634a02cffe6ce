package iprange

import (
	"errors"
	"fmt"
	"net/netip"
)

// CheckServiceAddress returns an error saying why a cannot be a Service address: it is the
// zero Addr, it has a zone, or it is IPv4-mapped IPv6. The last two are valid addresses, but
// a Service's status and the announcements on the wire carry neither zones nor mapped
// forms, and a mapped address would be a second spelling of an IPv4 one, escaping the
// checks that every address is held once.
func CheckServiceAddress(a netip.Addr) error {
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
