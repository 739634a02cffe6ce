package probe

import (
	"encoding/binary"
	"fmt"
)

// ParseRequest decodes an authenticated request. A datagram that is not one of this
// version is an ErrFormat; one whose code does not check, ErrAuth.
func (k *Key) ParseRequest(b []byte) (Request, error) {
	d, err := k.decoder(b, typeRequest)
	if err != nil {
		return Request{}, err
	}
	r := Request{Nonce: d.uint64(), Sender: Sender(d.byte()), Instance: d.uint64(), Counter: d.uint64(), Verdict: d.uint64()}
	flags := d.byte()
	r.DutyKnown = flags&flagDutyKnown != 0
	r.Idle = flags&flagIdle != 0
	r.Duty = Digest(d.uint64())
	r.To, r.Echo = d.uint64(), d.uint64()
	if err := d.end("request"); err != nil {
		return Request{}, err
	}
	// A bit this version does not know would be lost on the way through: refused, as the
	// bytes after the end are, since a later version says so with its version byte.
	if unknown := flags &^ (flagDutyKnown | flagIdle); unknown != 0 {
		return Request{}, fmt.Errorf("%w: unknown request flags %#02x", ErrFormat, unknown)
	}
	if r.Sender != FromCCM && r.Sender != FromAgent {
		return Request{}, fmt.Errorf("%w: unknown sender %d", ErrFormat, r.Sender)
	}
	return r, nil
}

// ParseReply decodes an authenticated reply. A reply longer than MaxUnfragmented, or
// whose share of a list is longer than the list, is an ErrFormat: no sender makes one.
func (k *Key) ParseReply(b []byte) (Reply, error) {
	if len(b) > MaxUnfragmented {
		return Reply{}, fmt.Errorf("%w: a reply of %d bytes, at most %d", ErrFormat, len(b), MaxUnfragmented)
	}
	d, err := k.decoder(b, typeReply)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Nonce: d.uint64(), Challenge: d.uint64(), State: State(d.byte())}
	flags := d.byte()
	r.StandsDown = flags&flagStandsDown != 0
	r.ConfirmedOnly = flags&flagConfirmedOnly != 0
	r.TakesIdle = flags&flagTakesIdle != 0
	r.Node = d.name()
	r.Verdict = VerdictRef{Instance: d.uint64(), Seq: d.uint64()}
	r.CacheVersion = d.uint64()
	r.CoverSum = ListSum{Len: int(d.uint16()), Digest: d.uint64()}
	m := int(d.byte())
	if m > r.CoverSum.Len && d.err == nil {
		d.err = fmt.Errorf("%w: a reply carrying %d of %d covered nodes", ErrFormat, m, r.CoverSum.Len)
	}
	for ; m > 0 && d.err == nil; m-- {
		r.Covers = append(r.Covers, d.uint64())
	}
	r.Digest = Digest(d.uint64())
	r.UnableSum = ListSum{Len: int(d.byte()), Digest: d.uint64()}
	if r.UnableSum.Len > MaxUnable && d.err == nil {
		d.err = fmt.Errorf("%w: a reply naming %d pools and families it cannot announce, at most %d", ErrFormat, r.UnableSum.Len, MaxUnable)
	}
	u := int(d.byte())
	if u > r.UnableSum.Len && d.err == nil {
		d.err = fmt.Errorf("%w: a reply carrying %d of %d pools and families it cannot announce", ErrFormat, u, r.UnableSum.Len)
	}
	for ; u > 0 && d.err == nil; u-- {
		family := d.byte()
		x := Unable{Reason: UnableReason(d.byte()), Pool: d.name()}
		x.Interface = string(d.take(int(d.byte())))
		var ok bool
		if x.Family, ok = familyFromWire(family); !ok && d.err == nil {
			d.err = fmt.Errorf("%w: unknown family %d of pool %q", ErrFormat, family, x.Pool)
		}
		if err := x.Check(); err != nil && d.err == nil {
			d.err = fmt.Errorf("%w: %v", ErrFormat, err)
		}
		r.Unable = append(r.Unable, x)
	}
	if err := d.end("reply"); err != nil {
		return Reply{}, err
	}
	if r.State != Ready && r.State != Draining && r.State != Starting {
		return Reply{}, fmt.Errorf("%w: unknown %v", ErrFormat, r.State)
	}
	return r, nil
}

// ParseVerdict decodes a verdict datagram authenticated by k and signed by a key of v.
// One authenticated but not signed is an ErrSignature.
func (k *Key) ParseVerdict(v *Verifier, b []byte) (VerdictPart, error) {
	return k.ParseFreshVerdict(v, b, nil)
}

// ParseFreshVerdict is ParseVerdict that refuses, with ErrStale and before checking the
// signature, a verdict whose reference fresh refuses.
func (k *Key) ParseFreshVerdict(v *Verifier, b []byte, fresh func(VerdictRef) bool) (VerdictPart, error) {
	var check func(*decoder) bool
	if fresh != nil {
		check = func(d *decoder) bool { return fresh(VerdictRef{Instance: d.uint64(), Seq: d.uint64()}) }
	}
	d, err := k.signedDecoder(v, b, typeVerdict, check)
	if err != nil {
		return VerdictPart{}, err
	}
	p := VerdictPart{Verdict: Verdict{VerdictRef: VerdictRef{Instance: d.uint64(), Seq: d.uint64()}}}
	var n int
	p.Part, p.Parts, n = d.parts("verdict")
	for ; n > 0 && d.err == nil; n-- {
		p.Down = append(p.Down, d.name())
	}
	if err := d.end("verdict"); err != nil {
		return VerdictPart{}, err
	}
	return p, nil
}

// IsVerdict reports whether b claims to be a verdict of this version: which Parse to call.
func IsVerdict(b []byte) bool { return len(b) >= headerLen && b[3] == typeVerdict }

// IsDuty reports whether b claims to be a duty of this version: which Parse to call.
func IsDuty(b []byte) bool { return len(b) >= headerLen && b[3] == typeDuty }

// decoder checks b's header and code and returns a decoder of its body.
func (k *Key) decoder(b []byte, typ byte) (*decoder, error) {
	if err := checkHeader(b, typ); err != nil {
		return nil, err
	}
	body, err := k.open(b)
	if err != nil {
		return nil, err
	}
	return &decoder{b: body[headerLen:], size: len(b)}, nil
}

// decoder reads the fields of an authenticated body; the first short read sets err and
// makes every later read return zeros.
type decoder struct {
	b    []byte
	size int
	err  error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		if d.err == nil {
			d.err = fmt.Errorf("%w: datagram of %d bytes ends inside a field", ErrFormat, d.size)
		}
		return make([]byte, n)
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) byte() byte     { return d.take(1)[0] }
func (d *decoder) uint16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) uint64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }
func (d *decoder) name() string {
	n := int(d.byte())
	if (n == 0 || n > MaxNodeName) && d.err == nil {
		d.err = fmt.Errorf("%w: node name of %d bytes in a datagram of %d, want 1 to %d", ErrFormat, n, d.size, MaxNodeName)
	}
	return string(d.take(n))
}

// end reports the first short read, or bytes left over: fields a later version adds come
// after those of this one, but a datagram of this version has none.
func (d *decoder) end(what string) error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) > 0 {
		return fmt.Errorf("%w: %d bytes after the end of a %s", ErrFormat, len(d.b), what)
	}
	return nil
}

func checkHeader(b []byte, typ byte) error {
	switch {
	case len(b) < headerLen+macLen:
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrFormat, len(b), headerLen+macLen)
	case b[0] != magic[0] || b[1] != magic[1]:
		return fmt.Errorf("%w: magic %#x, want %#x", ErrFormat, b[:2], magic[:])
	case b[2] != Version:
		return fmt.Errorf("%w: version %d, want %d", ErrFormat, b[2], Version)
	case b[3] != typ:
		return fmt.Errorf("%w: type %d, want %d", ErrFormat, b[3], typ)
	}
	return nil
}
