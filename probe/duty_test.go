package probe

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
)

func TestDigest(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00::1")
	if DigestOf(nil) != 0 {
		t.Errorf("DigestOf(nil) = %v, want 0", DigestOf(nil))
	}
	if DigestOf([]netip.Addr{a, b, c}) != DigestOf([]netip.Addr{c, a, b}) {
		t.Error("the digest depends on the order of the addresses")
	}
	if DigestOf([]netip.Addr{a, b}) == DigestOf([]netip.Addr{a, c}) || DigestOf([]netip.Addr{a}) == DigestOf(nil) {
		t.Error("two sets have one digest")
	}
	if d := DigestOf([]netip.Addr{a, b}).With(b); d != DigestOf([]netip.Addr{a}) {
		t.Errorf("With of an address in the set = %v, want the set without it %v", d, DigestOf([]netip.Addr{a}))
	}
	if DigestOf([]netip.Addr{netip.MustParseAddr("::ffff:198.18.0.1")}) != DigestOf([]netip.Addr{a}) {
		t.Error("an IPv4-mapped address digests unlike the IPv4 one")
	}
}

// manyAddrs returns n addresses, IPv6 and IPv4 alternately.
func manyAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		if i%2 == 0 {
			out[i] = netip.MustParseAddr(fmt.Sprintf("fd00::%x", i))
		} else {
			out[i] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		}
	}
	return out
}

func TestDutyRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, dutyPerDatagram, dutyPerDatagram + 1, 3*dutyPerDatagram + 7} {
		d := Duty{Instance: 7, Addrs: manyAddrs(n)}
		d.Digest = DigestOf(d.Addrs)
		parts, err := testKey.AppendDuty(d)
		if err != nil {
			t.Fatal(err)
		}
		if want := max(1, (n+dutyPerDatagram-1)/dutyPerDatagram); len(parts) != want {
			t.Errorf("%d addresses in %d datagrams, want %d", n, len(parts), want)
		}
		var got []netip.Addr
		for i, b := range parts {
			if len(b) > MaxDatagram || !IsDuty(b) || IsVerdict(b) {
				t.Fatalf("part %d: %d bytes, IsDuty %v", i, len(b), IsDuty(b))
			}
			p, err := testKey.ParseDuty(b)
			if err != nil || p.Part != i || p.Parts != len(parts) || p.Instance != 7 || p.Digest != d.Digest {
				t.Fatalf("part %d: %+v, %v", i, p.Duty.Digest, err)
			}
			got = append(got, p.Addrs...)
		}
		if len(got) != n || (n > 0 && !reflect.DeepEqual(got, d.Addrs)) {
			t.Errorf("%d addresses came back as %d", n, len(got))
		}
		parts[0][len(parts[0])/2] ^= 1
		if _, err := testKey.ParseDuty(parts[0]); !errors.Is(err, ErrAuth) {
			t.Errorf("an altered duty parses: %v", err)
		}
	}
}

// TestResponderTakesDuties checks that a duty list is taken whole, in parts, only from
// the ccm followed, only when its addresses make its digest, and only when that digest is
// the one the ccm's newest request said to expect: a duty sent to another node, or an
// older one arriving late, must not make an agent announce what is not its own.
func TestResponderTakesDuties(t *testing.T) {
	r := newTestResponder(t)
	calls := 0
	r.OnDuty(func() { calls++ })
	ccm := newTalker(r, FromCCM, 10)
	expect := func(d Digest) {
		t.Helper()
		req := ccm.next()
		req.DutyKnown, req.Duty = true, d
		ccm.ask(t, req)
	}
	send := func(key *Key, d Duty) {
		t.Helper()
		parts, err := key.AppendDuty(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range parts {
			if _, ok := r.Handle(b, nil); ok {
				t.Fatal("a duty was answered")
			}
		}
	}
	big := Duty{Instance: 10, Addrs: manyAddrs(2*dutyPerDatagram + 1)}
	big.Digest = DigestOf(big.Addrs)
	ccm.ask(t, ccm.next()) // a challenge to echo
	expect(big.Digest)
	if d, known := r.Expected(); d != big.Digest || !known {
		t.Errorf("Expected() = %v, %v; want the request's %v, true", d, known, big.Digest)
	}
	send(testKey, big)
	if got := r.Duty(); got == nil || got.Digest != big.Digest || len(got.Addrs) != len(big.Addrs) || calls != 1 {
		t.Fatalf("Duty() after a duty in 3 parts = %v", got)
	}
	one := manyAddrs(1)
	other := mustKey("another key, of the same length: 0123456789\n")
	for name, d := range map[string]struct {
		key    *Key
		duty   Duty
		expect Digest
	}{
		"a ccm not followed":            {testKey, Duty{Instance: 9, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"a wrong digest":                {testKey, Duty{Instance: 10, Addrs: one, Digest: 1}, 1},
		"another key's":                 {other, Duty{Instance: 10, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"another node's, or a late one": {testKey, Duty{Instance: 10, Addrs: one, Digest: DigestOf(one)}, DigestOf(manyAddrs(2))},
	} {
		expect(d.expect)
		send(d.key, d.duty)
		if got := r.Duty(); got.Digest != big.Digest {
			t.Errorf("%s duty replaced the one held", name)
		}
	}
	expect(0)
	send(testKey, Duty{Instance: 10})
	if got := r.Duty(); got == nil || got.Digest != 0 || len(got.Addrs) != 0 || calls != 2 {
		t.Errorf("Duty() after an empty duty = %+v", got)
	}
}
