// Package conntrack clears what a node's connection tracking remembers of connections
// that reached it for a Service address before the node's forwarding rules for that
// address were in place.
//
// kube-proxy, like any data plane built on the kernel's NAT, translates a Service address
// only for a connection's first packet; the kernel's connection tracking keeps that
// verdict, translated or not, for as long as the connection's packets keep coming. A node
// begins to answer for an address as soon as the ccm names it, which for a new Service is
// before its kube-proxy has written the address's rules. A client's SYN that arrives in
// that gap is tracked untranslated, and the entry (SYN_SENT: two minutes, renewed by each
// SYN of the same connection) leaves every retransmission of that SYN untranslated too,
// long after the rules are in place: the node forwards it back to the segment, where no
// one takes it. A client that reuses source ports quickly, or one behind a NAT, meets the
// same entries with new connections. kube-proxy clears such entries of UDP Services;
// nothing clears those of TCP.
package conntrack

import (
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Stale reports whether e is a TCP connection that the node tracked untranslated to the
// address it returns and that was never answered: its reply would come from where it was
// sent, and it has seen no SYN-ACK. For a Service address the node does not hold itself,
// such an entry is a connection the node's data plane did not take, and whose later
// packets it will not take either. An answered one (a local listener on the address, as
// with a data plane that puts Service addresses on an interface) is never stale.
func Stale(e Entry) (netip.Addr, bool) {
	if e.Proto != unix.IPPROTO_TCP || e.TCPState != nl.TCP_CONNTRACK_SYN_SENT || e.Status&(statusSeenReply|statusDstNAT) != 0 {
		return netip.Addr{}, false
	}
	dst := netip.AddrPortFrom(e.Dst.Addr().Unmap(), e.Dst.Port())
	if !dst.Addr().IsValid() || dst != netip.AddrPortFrom(e.ReplySrc.Addr().Unmap(), e.ReplySrc.Port()) {
		return netip.Addr{}, false
	}
	return dst.Addr(), true
}
