package probe

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Digest sums up a set of addresses in 8 bytes: the ccm's requests carry the digest of
// what it expects an agent to announce, and the agent's replies the digest of what its own
// view gives it, so that a cache left behind shows at once, at no cost in steady state.
// The zero Digest is the empty set's.
type Digest uint64

// DigestOf returns the digest of a set of addresses, in any order and without repeats.
func DigestOf(addrs []netip.Addr) Digest {
	var d Digest
	for _, a := range addrs {
		d = d.With(a)
	}
	return d
}

// With returns the digest of the set with a added, or removed if it was in it: the
// addresses' hashes are combined by exclusive or, so that a change costs one hash.
func (d Digest) With(a netip.Addr) Digest {
	b := a.Unmap().As16()
	h := sha256.Sum256(b[:])
	return d ^ Digest(binary.BigEndian.Uint64(h[:8]))
}

// String returns the digest in hexadecimal, for logs.
func (d Digest) String() string { return fmt.Sprintf("%016x", uint64(d)) }

// Duty is the list of addresses the ccm expects an agent to announce, sent to an agent
// whose own view differs: an agent that cannot trust its view announces only these.
type Duty struct {
	// Instance is the ccm's, as in its requests.
	Instance uint64
	// Seq increases with every duty list the instance makes, for any node: an agent takes
	// no list older than the one it holds.
	Seq uint64
	// To is the NodeTag of the node the list is for: a list recorded on its way to one
	// node is nothing to another.
	To uint64
	// Digest is DigestOf(Addrs).
	Digest Digest
	// Addrs are the addresses.
	Addrs []netip.Addr
}

// AppendDuty returns the datagrams of d, signed by s and authenticated by k: one, or
// more when d holds more addresses than one holds. It fails only beyond MaxParts.
func (k *Key) AppendDuty(s *Signer, d Duty) ([][]byte, error) {
	head := []byte{magic[0], magic[1], Version, typeDuty}
	head = binary.BigEndian.AppendUint64(head, d.Instance)
	head = binary.BigEndian.AppendUint64(head, d.Seq)
	head = binary.BigEndian.AppendUint64(head, d.To)
	head = binary.BigEndian.AppendUint64(head, uint64(d.Digest))
	out, err := k.appendParts(s, head, len(d.Addrs),
		func(i int) int { return 1 + d.Addrs[i].Unmap().BitLen()/8 },
		func(b []byte, i int) []byte {
			a := d.Addrs[i].Unmap()
			return append(append(b, byte(a.BitLen()/8)), a.AsSlice()...)
		})
	if err != nil {
		return nil, fmt.Errorf("probe duty of %d addresses: %w", len(d.Addrs), err)
	}
	return out, nil
}

// DutyPart is one datagram of a Duty: Addrs holds the part's addresses.
type DutyPart struct {
	Duty
	// Part is this datagram's place, from 0, and Parts their number.
	Part, Parts int
}

// ParseDuty decodes a duty datagram authenticated by k and signed by a key of v.
func (k *Key) ParseDuty(v *Verifier, b []byte) (DutyPart, error) {
	return k.ParseFreshDuty(v, b, nil)
}

// ParseFreshDuty is ParseDuty that refuses, with ErrStale and before checking the signature,
// a duty whose head (its fields before the addresses) fresh refuses.
func (k *Key) ParseFreshDuty(v *Verifier, b []byte, fresh func(Duty) bool) (DutyPart, error) {
	var check func(*decoder) bool
	if fresh != nil {
		check = func(d *decoder) bool { return fresh(dutyHead(d)) }
	}
	d, err := k.signedDecoder(v, b, typeDuty, check)
	if err != nil {
		return DutyPart{}, err
	}
	p := DutyPart{Duty: dutyHead(d)}
	var n int
	p.Part, p.Parts, n = d.parts("duty")
	for ; n > 0 && d.err == nil; n-- {
		l := int(d.byte())
		if l != 4 && l != 16 && d.err == nil {
			d.err = fmt.Errorf("%w: an address of %d bytes in a duty", ErrFormat, l)
		}
		a, _ := netip.AddrFromSlice(d.take(l))
		p.Addrs = append(p.Addrs, a)
	}
	if err := d.end("duty"); err != nil {
		return DutyPart{}, err
	}
	return p, nil
}

// dutyHead reads the fields of a duty before its parts and addresses.
func dutyHead(d *decoder) Duty {
	return Duty{Instance: d.uint64(), Seq: d.uint64(), To: d.uint64(), Digest: Digest(d.uint64())}
}

// wireFamily is f as a reply carries it: 4 or 6.
func wireFamily(f iprange.Family) byte {
	if f == iprange.IPv4 {
		return 4
	}
	return 6
}

// familyFromWire is the family a reply's 4 or 6 says, and false for any other value.
func familyFromWire(b byte) (iprange.Family, bool) {
	switch b {
	case 4:
		return iprange.IPv4, true
	case 6:
		return iprange.IPv6, true
	}
	return 0, false
}

// UnableReason says why an agent cannot announce a pool's addresses of a family.
type UnableReason uint8

const (
	// NoUpInterface means none of the pool's interfaces (or, for a pool that names none,
	// no interface with a subnet of the pool) is up.
	NoUpInterface UnableReason = 1
	// NoAddress means the interface is up but has no address of the family, as a link
	// that went down and up can come back without its IPv6 addresses.
	NoAddress UnableReason = 2
)

// Unable is a pool and family an agent cannot announce now, and why.
type Unable struct {
	Pool      string
	Family    iprange.Family
	Reason    UnableReason
	Interface string // the interface concerned, for NoAddress
}

// MaxInterfaceName is the longest Linux interface name.
const MaxInterfaceName = 15

// Check returns an error unless u can travel in a reply: a known reason, a pool name
// that travels as a name, and an interface name of at most MaxInterfaceName bytes.
func (u Unable) Check() error {
	switch {
	case u.Reason != NoUpInterface && u.Reason != NoAddress:
		return fmt.Errorf("unknown reason %d for pool %q", u.Reason, u.Pool)
	case len(u.Interface) > MaxInterfaceName:
		return fmt.Errorf("interface name %q of pool %q is %d bytes, at most %d", u.Interface, u.Pool, len(u.Interface), MaxInterfaceName)
	}
	return CheckName(u.Pool)
}

// Explain says, for people, why node cannot announce: "node-a has no up interface for
// pool public", "node-a has no IPv6 address on eth0".
func (u Unable) Explain(node string) string {
	if u.Reason == NoAddress && u.Interface != "" {
		return fmt.Sprintf("%s has no %s address on %s", node, u.Family, u.Interface)
	}
	if u.Reason == NoAddress {
		return fmt.Sprintf("%s has no %s address for pool %s", node, u.Family, u.Pool)
	}
	return fmt.Sprintf("%s has no up interface for pool %s", node, u.Pool)
}

// SortUnable sorts by pool, then family: replies are compared as they come.
func SortUnable(u []Unable) {
	slices.SortFunc(u, func(a, b Unable) int {
		if a.Pool != b.Pool {
			if a.Pool < b.Pool {
				return -1
			}
			return 1
		}
		return int(a.Family) - int(b.Family)
	})
}
