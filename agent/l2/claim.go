package l2

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// ClaimKind says how a frame tells the segment that an address is at a hardware address.
type ClaimKind uint8

// The ways a frame claims an address.
const (
	// NoClaim: the frame claims no address.
	NoClaim ClaimKind = iota
	// ClaimReply: an ARP reply, or a solicited neighbour advertisement: the sender answered
	// a request for the address.
	ClaimReply
	// ClaimAnnouncement: a gratuitous ARP, request or reply form, or an unsolicited
	// neighbour advertisement: the sender tells every host the address is its own.
	ClaimAnnouncement
	// ClaimSource: an ARP request or a neighbour solicitation sent from the address: the
	// sender uses it as its own, and every host that hears it may update its entry.
	ClaimSource
	// ClaimDAD: duplicate address detection, a neighbour solicitation from the unspecified
	// address to the address's solicited-node group: the sender is about to configure the
	// address, and gives up on it when it is answered. ARP probes (RFC 5227, sender
	// 0.0.0.0) are not claims: switches send them to check that hosts are there.
	ClaimDAD
)

var claimNames = [...]string{
	NoClaim:           "None",
	ClaimReply:        "Reply",
	ClaimAnnouncement: "Announcement",
	ClaimSource:       "Source",
	ClaimDAD:          "DuplicateAddressDetection",
}

// String returns the kind's name, as in logs and metrics.
func (k ClaimKind) String() string {
	if int(k) < len(claimNames) {
		return claimNames[k]
	}
	return "ClaimKind(" + strconv.Itoa(int(k)) + ")"
}

// Describe says, for people, what a frame of the kind was ("sent a gratuitous ARP").
func (k ClaimKind) Describe(ipv6 bool) string {
	switch {
	case k == ClaimReply && ipv6:
		return "answered a neighbour solicitation for it"
	case k == ClaimReply:
		return "answered an ARP request for it"
	case k == ClaimAnnouncement && ipv6:
		return "sent an unsolicited neighbour advertisement for it"
	case k == ClaimAnnouncement:
		return "sent a gratuitous ARP for it"
	case k == ClaimSource && ipv6:
		return "sent a neighbour solicitation from it"
	case k == ClaimSource:
		return "sent an ARP request from it"
	case k == ClaimDAD:
		return "ran duplicate address detection for it, to configure it"
	}
	return "claimed it"
}

// A Claim is what a frame says about one address: that it is at MAC.
type Claim struct {
	// Addr is the address claimed.
	Addr netip.Addr
	// MAC is where the frame says Addr is: the hardware address a neighbour cache that
	// takes the frame would enter for it.
	MAC net.HardwareAddr
	// Kind is how the frame claims it.
	Kind ClaimKind
}

// ARPClaim returns what an ARP frame claims, with Kind NoClaim when it claims nothing:
// a malformed or tagged frame, ARP other than IPv4 over Ethernet, an ARP probe.
func ARPClaim(frame []byte) Claim {
	var f ethernet.Frame
	if f.UnmarshalBinary(frame) != nil || f.EtherType != ethernet.EtherTypeARP || f.VLAN != nil || f.ServiceVLAN != nil {
		return Claim{}
	}
	var p arp.Packet
	if p.UnmarshalBinary(f.Payload) != nil || p.HardwareType != 1 || p.ProtocolType != uint16(ethernet.EtherTypeIPv4) || p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return Claim{}
	}
	if !p.SenderIP.Is4() || p.SenderIP.IsUnspecified() {
		return Claim{}
	}
	c := Claim{Addr: p.SenderIP, MAC: p.SenderHardwareAddr}
	switch {
	case p.SenderIP == p.TargetIP:
		c.Kind = ClaimAnnouncement
	case p.Operation == arp.OperationReply && bytes.Equal(p.SenderHardwareAddr, p.TargetHardwareAddr):
		c.Kind = ClaimAnnouncement
	case p.Operation == arp.OperationReply:
		c.Kind = ClaimReply
	case p.Operation == arp.OperationRequest:
		c.Kind = ClaimSource
	default:
		return Claim{}
	}
	return c
}

// NDPClaim returns what a neighbour discovery frame claims, with Kind NoClaim when it
// claims nothing: one that RFC 4861 has a host drop (hop limit, checksum, code), a
// message other than a solicitation or an advertisement.
func NDPClaim(frame []byte) Claim {
	f, from, to, icmp, why := icmpv6Frame(frame)
	if why != Answered || f.Payload[7] != ndp.HopLimit || icmp[1] != 0 || icmpv6Checksum(from, to, icmp) != 0 {
		return Claim{}
	}
	m, err := ndp.ParseMessage(icmp)
	if err != nil {
		return Claim{}
	}
	switch m := m.(type) {
	case *ndp.NeighborAdvertisement:
		c := Claim{Addr: m.TargetAddress, MAC: linkLayer(m.Options, ndp.Target, f.Source), Kind: ClaimAnnouncement}
		if m.Solicited {
			c.Kind = ClaimReply
		}
		return c
	case *ndp.NeighborSolicitation:
		switch {
		case from.IsUnspecified() && bytes.Equal(f.Destination, multicastMAC(solicitedNode(m.TargetAddress))):
			return Claim{Addr: m.TargetAddress, MAC: f.Source, Kind: ClaimDAD}
		case from.IsUnspecified() || from.IsMulticast() || from.IsLinkLocalUnicast():
			return Claim{}
		}
		return Claim{Addr: from, MAC: linkLayer(m.Options, ndp.Source, f.Source), Kind: ClaimSource}
	}
	return Claim{}
}

// linkLayer returns the link-layer address option of direction dir, or else def: a
// neighbour cache enters the option's address when there is one.
func linkLayer(opts []ndp.Option, dir ndp.Direction, def net.HardwareAddr) net.HardwareAddr {
	for _, o := range opts {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == dir && len(lla.Addr) == 6 {
			return lla.Addr
		}
	}
	return def
}
