package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxParts bounds the datagrams of one verdict or duty list: 4,096 datagrams hold more
// than 250,000 addresses, or 16,000 nodes of 253-byte names.
const MaxParts = 4096

// partsLen is what a signed message in parts adds to its head: part, parts and the count
// of its items, then the signature and the code.
const partsLen = 2 + 2 + 2 + sigLen + macLen

// appendParts returns the datagrams of a signed message of n items, split so that none
// is longer than MaxUnfragmented: each is head, its part (from 0), the number of parts,
// the number of its items and the items, signed by s and sealed by k. size(i) is the
// length of item i as item(b, i) appends it.
func (k *Key) appendParts(s *Signer, head []byte, n int, size func(int) int, item func([]byte, int) []byte) ([][]byte, error) {
	room := MaxUnfragmented - len(head) - partsLen
	// ends[p] is the first item after part p.
	var ends []int
	used := 0
	for i := range n {
		l := size(i)
		if l > room {
			return nil, fmt.Errorf("an item of %d bytes, more than a datagram holds (%d)", l, room)
		}
		if used+l > room {
			ends = append(ends, i)
			used = 0
		}
		used += l
	}
	ends = append(ends, n)
	if len(ends) > MaxParts {
		return nil, fmt.Errorf("%d items take %d datagrams, at most %d", n, len(ends), MaxParts)
	}
	out := make([][]byte, 0, len(ends))
	from := 0
	for p, to := range ends {
		b := make([]byte, 0, MaxUnfragmented)
		b = append(b, head...)
		b = binary.BigEndian.AppendUint16(b, uint16(p))
		b = binary.BigEndian.AppendUint16(b, uint16(len(ends)))
		b = binary.BigEndian.AppendUint16(b, uint16(to-from))
		for i := from; i < to; i++ {
			b = item(b, i)
		}
		out = append(out, k.seal(s.sign(b)))
		from = to
	}
	return out, nil
}

// ErrStale is returned for a verdict or duty that the caller's freshness check refused
// before its signature was checked.
var ErrStale = errors.New("probe datagram not newer than the one held")

// signedDecoder checks b's header, code and signature and returns a decoder of its body.
// fresh, if not nil, reads the body once its code checks and before its signature is
// checked, and refuses it with ErrStale: a replayed or late datagram then costs the keyed
// hash alone, and the Ed25519 verification, by far the dearest step, is spent only on
// what may be taken.
func (k *Key) signedDecoder(v *Verifier, b []byte, typ byte, fresh func(d *decoder) bool) (*decoder, error) {
	if err := checkHeader(b, typ); err != nil {
		return nil, err
	}
	body, err := k.open(b)
	if err != nil {
		return nil, err
	}
	if fresh != nil && !fresh(&decoder{b: body[headerLen:], size: len(b)}) {
		return nil, ErrStale
	}
	if body, err = v.open(body); err != nil {
		return nil, err
	}
	return &decoder{b: body[headerLen:], size: len(b)}, nil
}

// parts reads a part's place, the number of parts and the number of its items.
func (d *decoder) parts(what string) (part, parts, items int) {
	part, parts, items = int(d.uint16()), int(d.uint16()), int(d.uint16())
	if d.err == nil && (parts == 0 || parts > MaxParts || part >= parts) {
		d.err = fmt.Errorf("%w: %s part %d of %d, want fewer than the parts and 1 to %d parts", ErrFormat, what, part, parts, MaxParts)
	}
	return part, parts, items
}
