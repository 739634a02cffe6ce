package l2

import "strconv"

// Drop says why a received frame gets no answer: what ARPReply and NDPReply return, and
// what Serve logs. The zero value, Answered, is no drop.
type Drop uint8

// The reasons a frame is dropped, roughly in the order they are checked.
const (
	// Answered: the frame is a request for an owned address, and gets a reply.
	Answered Drop = iota
	// Malformed: not a whole frame of the socket's protocol.
	Malformed
	// VLANTagged: the frame carries an 802.1Q tag. The reply would leave untagged, on
	// another VLAN than the question came from.
	VLANTagged
	// NotEthernetARP: ARP for another hardware (type not 1) or protocol (not IPv4), or
	// with address lengths other than 6 and 4. Its addresses are not ours to read.
	NotEthernetARP
	// NotRequest: an ARP reply, or an ICMPv6 message other than a neighbour solicitation.
	NotRequest
	// NotForUs: sent to a MAC address that is neither ours nor broadcast (for ARP) or the
	// target's solicited-node group (for NDP): a packet socket also sees frames flooded
	// to other hosts.
	NotForUs
	// Announcement: an ARP request whose sender address is its target address, which
	// tells rather than asks.
	Announcement
	// NotFromLink: a solicitation whose hop limit is not 255, so a router forwarded it
	// (RFC 4861, 7.1.1).
	NotFromLink
	// BadChecksum: a solicitation whose ICMPv6 checksum does not check. A packet socket
	// gets frames before the kernel's IPv6 stack, which would have verified it.
	BadChecksum
	// BadCode: a solicitation with an ICMPv6 code other than 0 (RFC 4861, 7.1.1).
	BadCode
	// MulticastSource: a solicitation from a multicast address, which no host has
	// (RFC 4291, 2.7); the answer would go to a group.
	MulticastSource
	// DADWithSourceLinkLayer: a solicitation from the unspecified address, as duplicate
	// address detection sends, that carries a source link-layer address option; RFC 4861,
	// 7.1.1, says to drop it.
	DADWithSourceLinkLayer
	// NotOwned: a well-formed request for an address the responder does not own now.
	NotOwned
)

var dropNames = [...]string{
	Answered:               "Answered",
	Malformed:              "Malformed",
	VLANTagged:             "VLANTagged",
	NotEthernetARP:         "NotEthernetARP",
	NotRequest:             "NotRequest",
	NotForUs:               "NotForUs",
	Announcement:           "Announcement",
	NotFromLink:            "NotFromLink",
	BadChecksum:            "BadChecksum",
	BadCode:                "BadCode",
	MulticastSource:        "MulticastSource",
	DADWithSourceLinkLayer: "DADWithSourceLinkLayer",
	NotOwned:               "NotOwned",
}

// String returns the reason's name, as in logs.
func (d Drop) String() string {
	if int(d) < len(dropNames) {
		return dropNames[d]
	}
	return "Drop(" + strconv.Itoa(int(d)) + ")"
}
