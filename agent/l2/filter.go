package l2

import (
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"golang.org/x/net/bpf"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Offsets in an Ethernet frame of the fields the kernel filters read: an ARP packet's
// (RFC 826, IPv4 over Ethernet), and an ICMPv6 message's right after the IPv6 header.
const (
	etherTypeOff    = 12
	arpOperationOff = 14 + 6
	arpSenderIPOff  = 14 + 8 + 6
	arpTargetIPOff  = 14 + 8 + 6 + 4 + 6
	ipv6NextOff     = 14 + 6
	icmpv6TypeOff   = 14 + ipv6HeaderLen
	// naTargetOff is the target address of a neighbour advertisement.
	naTargetOff = icmpv6TypeOff + 8
	typeNA      = 136
)

// maxFilterRanges is how many ranges of a family the filters test one by one; with more,
// they let every claim of the family through, and user space sorts them out. Each costs
// at most 13 instructions of the kernel's 4096.
const maxFilterRanges = 128

const (
	keep = 1 << 16
	drop = 0
)

// arpFilter keeps a packet socket to the ARP frames the Responder reads: requests that
// ask a question (operation 1, sender address other than the target address) if
// questions is set, and any other ARP frame whose sender address lies in ranges, which
// claims an address of a pool (ARPClaim). Other replies and announcements stay in the kernel: in a failover the new
// owner sends thousands of gratuitous requests, and a node that owns none of them would
// copy each to user space only to drop it there.
func arpFilter(ranges []iprange.Range, questions bool) []bpf.RawInstruction {
	question := bpf.RetConstant{Val: drop}
	if questions {
		question.Val = keep
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: etherTypeOff, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ethernet.EtherTypeARP), SkipTrue: 1},
		bpf.RetConstant{Val: drop},
		bpf.LoadAbsolute{Off: arpOperationOff, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(arp.OperationRequest), SkipTrue: 5},
		bpf.LoadAbsolute{Off: arpSenderIPOff, Size: 4},
		bpf.TAX{},
		bpf.LoadAbsolute{Off: arpTargetIPOff, Size: 4},
		bpf.JumpIfX{Cond: bpf.JumpEqual, SkipTrue: 1},
		question,
		// An announcement or a reply: a claim of its sender address.
		bpf.LoadAbsolute{Off: arpSenderIPOff, Size: 4},
	}
	return assemble("ARP", append(prog, inRanges(ranges, iprange.IPv4)...))
}

// ndpFilter keeps a packet socket to the neighbour discovery frames the Responder reads:
// solicitations if questions is set (IPv6, ICMPv6 right after the fixed header, as
// neither message carries extension headers, type 135), and advertisements (type 136) whose target lies in
// ranges, which claim an address of a pool (NDPClaim). Every other frame stays in the
// kernel instead of being copied to the agent.
func ndpFilter(ranges []iprange.Range, questions bool) []bpf.RawInstruction {
	question := bpf.RetConstant{Val: drop}
	if questions {
		question.Val = keep
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: etherTypeOff, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(ethernet.EtherTypeIPv6), SkipTrue: 5},
		bpf.LoadAbsolute{Off: ipv6NextOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protocolICMPv6, SkipTrue: 3},
		bpf.LoadAbsolute{Off: icmpv6TypeOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: typeNS, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: typeNA, SkipTrue: 2},
		bpf.RetConstant{Val: drop},
		question,
	}
	return assemble("NDP", append(prog, inRanges(ranges, iprange.IPv6)...))
}

// filterOf returns ndpFilter for IPv6, arpFilter otherwise.
func filterOf(ipv6 bool, ranges []iprange.Range, questions bool) []bpf.RawInstruction {
	if ipv6 {
		return ndpFilter(ranges, questions)
	}
	return arpFilter(ranges, questions)
}

// inRanges returns the end of a filter: keep the frame when the address at the offset
// of the family's claims (an ARP sender, an advertisement's target) lies in one of the
// ranges of the family, and drop it otherwise. For IPv4 the accumulator holds the
// sender address already; IPv6 ranges are tested by the prefix that covers each, a
// superset that user space narrows.
func inRanges(ranges []iprange.Range, f iprange.Family) []bpf.Instruction {
	var mine []iprange.Range
	for _, r := range ranges {
		if r.Family() == f {
			mine = append(mine, r)
		}
	}
	if len(mine) > maxFilterRanges {
		return []bpf.Instruction{bpf.RetConstant{Val: keep}}
	}
	var prog []bpf.Instruction
	for _, r := range mine {
		if f == iprange.IPv4 {
			first, last := r.First.As4(), r.Last.As4()
			prog = append(prog,
				bpf.JumpIf{Cond: bpf.JumpLessThan, Val: be32(first[:]), SkipTrue: 2},
				bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: be32(last[:]), SkipTrue: 1},
				bpf.RetConstant{Val: keep},
			)
			continue
		}
		prog = append(prog, inPrefix(covering(r))...)
	}
	return append(prog, bpf.RetConstant{Val: drop})
}

// inPrefix tests an advertisement's target against p a 32-bit word at a time, and keeps
// the frame when every word matches; otherwise it goes on past its own instructions.
func inPrefix(p netip.Prefix) []bpf.Instruction {
	a := p.Addr().As16()
	var block []bpf.Instruction
	for w := 0; w*32 < p.Bits(); w++ {
		block = append(block, bpf.LoadAbsolute{Off: uint32(naTargetOff + 4*w), Size: 4})
		bits := min(32, p.Bits()-32*w)
		mask := ^uint32(0) << (32 - bits)
		if bits < 32 {
			block = append(block, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
		}
		block = append(block, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: be32(a[4*w:]) & mask})
	}
	block = append(block, bpf.RetConstant{Val: keep})
	// Each mismatch jumps past the rest of the block.
	for i, ins := range block {
		if j, ok := ins.(bpf.JumpIf); ok {
			j.SkipTrue = uint8(len(block) - 1 - i)
			block[i] = j
		}
	}
	return block
}

// covering returns the longest prefix that holds every address of r.
func covering(r iprange.Range) netip.Prefix {
	a, b := r.First.As16(), r.Last.As16()
	bits := 0
	for bits < 128 && a[bits/8]&(0x80>>(bits%8)) == b[bits/8]&(0x80>>(bits%8)) {
		bits++
	}
	p, _ := r.First.Prefix(bits)
	return p
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func assemble(what string, prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		// The programs are built from a fixed shape; no range makes them invalid.
		panic("l2: assemble the " + what + " filter: " + err.Error())
	}
	return raw
}
