package l2

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// zeroMAC is the target hardware address of a gratuitous ARP request, as RFC 5227 has it.
var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// ARPReply returns the reply to an ARP request frame, when it asks for an address owns
// reports, on an interface whose hardware address is mac. It answers only requests sent to
// broadcast or to mac: a packet socket also sees frames flooded to other hosts, and those
// are not ours to answer. Announcements (sender address equal to target address) are not
// questions and get no answer. Whatever gets no answer, the Drop says why.
func ARPReply(frame []byte, mac net.HardwareAddr, owns func(netip.Addr) bool) ([]byte, Drop) {
	var f ethernet.Frame
	switch {
	case f.UnmarshalBinary(frame) != nil || f.EtherType != ethernet.EtherTypeARP:
		return nil, Malformed
	case f.VLAN != nil || f.ServiceVLAN != nil:
		return nil, VLANTagged
	case !bytes.Equal(f.Destination, ethernet.Broadcast) && !bytes.Equal(f.Destination, mac):
		return nil, NotForUs
	}
	var req arp.Packet
	switch {
	case req.UnmarshalBinary(f.Payload) != nil:
		return nil, Malformed
	case req.HardwareType != 1 || req.ProtocolType != uint16(ethernet.EtherTypeIPv4) || req.HardwareAddrLength != 6 || req.IPLength != 4:
		return nil, NotEthernetARP
	case req.Operation != arp.OperationRequest:
		return nil, NotRequest
	case req.SenderIP == req.TargetIP:
		return nil, Announcement
	case !owns(req.TargetIP):
		return nil, NotOwned
	}
	reply, err := arp.NewPacket(arp.OperationReply, mac, req.TargetIP, req.SenderHardwareAddr, req.SenderIP)
	if err != nil {
		return nil, Malformed
	}
	return arpFrame(req.SenderHardwareAddr, mac, reply), Answered
}

// GratuitousARP returns the gratuitous ARP that announces addr at mac: a broadcast request
// whose sender and target address are both addr. A request, not a reply: a client kernel
// drops a reply to broadcast for an entry that changed less than its locktime (1 s) ago,
// so a second failover within a second would never reach it.
func GratuitousARP(mac net.HardwareAddr, addr netip.Addr) []byte {
	p, err := arp.NewPacket(arp.OperationRequest, mac, addr, zeroMAC, addr)
	if err != nil {
		// Only a bad MAC or a non-IPv4 address get here, and callers pass neither.
		panic("l2: gratuitous ARP for " + addr.String() + ": " + err.Error())
	}
	return arpFrame(ethernet.Broadcast, mac, p)
}

func arpFrame(dst, src net.HardwareAddr, p *arp.Packet) []byte {
	payload, err := p.MarshalBinary()
	if err != nil {
		panic("l2: marshal ARP: " + err.Error())
	}
	f := ethernet.Frame{Destination: dst, Source: src, EtherType: ethernet.EtherTypeARP, Payload: payload}
	b, err := f.MarshalBinary()
	if err != nil {
		panic("l2: marshal Ethernet: " + err.Error())
	}
	return b
}
