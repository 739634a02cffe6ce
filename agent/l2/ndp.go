package l2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

const (
	ipv6HeaderLen  = 40
	protocolICMPv6 = 58
	typeNS         = 135
)

var allNodes = netip.MustParseAddr("ff02::1")

// NDPReply returns the neighbour advertisement answering a neighbour solicitation frame,
// when it asks for an address owns reports, on an interface whose hardware address is mac
// and whose link-local address is src. It answers solicitations sent to mac (unicast, as a
// client refreshing its entry sends them) and to the solicited-node multicast group of the
// target, and no others: a packet socket also sees frames flooded to other hosts. It drops
// what RFC 4861 (7.1.1) says to drop, checksum included; the Drop says why.
func NDPReply(frame []byte, mac net.HardwareAddr, src netip.Addr, owns func(netip.Addr) bool) ([]byte, Drop) {
	f, from, to, icmp, why := icmpv6Frame(frame)
	if why != Answered {
		return nil, why
	}
	p := f.Payload
	m, err := ndp.ParseMessage(icmp)
	if err != nil {
		return nil, Malformed
	}
	ns, ok := m.(*ndp.NeighborSolicitation)
	switch {
	case !ok:
		return nil, NotRequest
	case !ns.TargetAddress.Is6() || ns.TargetAddress.Is4In6():
		return nil, Malformed
	case !bytes.Equal(f.Destination, mac) && !bytes.Equal(f.Destination, multicastMAC(solicitedNode(ns.TargetAddress))):
		return nil, NotForUs
	case p[7] != ndp.HopLimit:
		return nil, NotFromLink
	case icmpv6Checksum(from, to, icmp) != 0:
		return nil, BadChecksum
	case icmp[1] != 0:
		return nil, BadCode
	case from.IsMulticast():
		return nil, MulticastSource
	case from.IsUnspecified() && hasSourceLinkLayer(ns):
		return nil, DADWithSourceLinkLayer
	case !owns(ns.TargetAddress):
		return nil, NotOwned
	}
	// A solicitation from the unspecified address is duplicate address detection: the
	// answer goes to all nodes, and is not "solicited" (RFC 4861, 7.2.4).
	dst, dstMAC, solicited := from, f.Source, true
	if from.IsUnspecified() {
		dst, dstMAC, solicited = allNodes, multicastMAC(allNodes), false
	}
	return naFrame(dstMAC, mac, src, dst, ns.TargetAddress, solicited), Answered
}

// icmpv6Frame splits an Ethernet frame holding an ICMPv6 message right after the IPv6
// header into the frame, the IPv6 source and destination and the message. The Drop is
// Answered when it does, and otherwise says why not.
func icmpv6Frame(frame []byte) (f ethernet.Frame, from, to netip.Addr, icmp []byte, why Drop) {
	if f.UnmarshalBinary(frame) != nil || f.EtherType != ethernet.EtherTypeIPv6 {
		return f, from, to, nil, Malformed
	}
	if f.VLAN != nil || f.ServiceVLAN != nil {
		return f, from, to, nil, VLANTagged
	}
	p := f.Payload
	if len(p) < ipv6HeaderLen || p[0]>>4 != 6 || p[6] != protocolICMPv6 {
		return f, from, to, nil, Malformed
	}
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if n < 4 || len(p) < ipv6HeaderLen+n {
		return f, from, to, nil, Malformed
	}
	from, to = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	return f, from, to, p[ipv6HeaderLen : ipv6HeaderLen+n], Answered
}

func hasSourceLinkLayer(ns *ndp.NeighborSolicitation) bool {
	for _, o := range ns.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Source {
			return true
		}
	}
	return false
}

// icmpv6Checksum returns the Internet checksum of an ICMPv6 message with its IPv6
// pseudo-header (RFC 8200, 8.1): 0 for a received message whose checksum is right.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	s, d := src.As16(), dst.As16()
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(s[:])
	add(d[:])
	add(binary.BigEndian.AppendUint32(nil, uint32(len(msg))))
	add([]byte{0, 0, 0, protocolICMPv6})
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// UnsolicitedNA returns the unsolicited neighbour advertisement that announces addr at mac
// to all nodes, from the link-local address src, with Override set so that clients replace
// the entry they have.
func UnsolicitedNA(mac net.HardwareAddr, src, addr netip.Addr) []byte {
	return naFrame(multicastMAC(allNodes), mac, src, allNodes, addr, false)
}

func naFrame(dstMAC, srcMAC net.HardwareAddr, src, dst, target netip.Addr, solicited bool) []byte {
	na := &ndp.NeighborAdvertisement{
		Solicited:     solicited,
		Override:      true,
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: srcMAC}},
	}
	return ndpFrame(dstMAC, srcMAC, src, dst, na)
}

// ndpFrame returns the Ethernet frame of a neighbour discovery message from src at srcMAC
// to dst at dstMAC, with the hop limit of 255 that receivers check.
func ndpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, m ndp.Message) []byte {
	icmp, err := ndp.MarshalMessageChecksum(m, src, dst)
	if err != nil {
		panic("l2: marshal " + m.Type().String() + " to " + dst.String() + ": " + err.Error())
	}
	ip := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(icmp))
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], uint16(len(icmp)))
	ip[6], ip[7] = protocolICMPv6, ndp.HopLimit
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	f := ethernet.Frame{Destination: dstMAC, Source: srcMAC, EtherType: ethernet.EtherTypeIPv6, Payload: append(ip, icmp...)}
	b, err := f.MarshalBinary()
	if err != nil {
		panic("l2: marshal Ethernet: " + err.Error())
	}
	return b
}

// solicitedNode returns the solicited-node multicast group of addr (RFC 4291, 2.7.1).
func solicitedNode(addr netip.Addr) netip.Addr {
	g, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		panic("l2: solicited-node group of " + addr.String() + ": " + err.Error())
	}
	return g
}

// multicastMAC returns the Ethernet address of an IPv6 multicast group (RFC 2464, 7).
func multicastMAC(group netip.Addr) net.HardwareAddr {
	a := group.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
