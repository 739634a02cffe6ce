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
// the newest ccm, and only when its addresses make its digest.
func TestResponderTakesDuties(t *testing.T) {
	p := newTestPeer(t)
	taken := make(chan struct{}, 10)
	p.r.OnDuty(func() { taken <- struct{}{} })
	p.ask(t, Request{Nonce: 1, Sender: FromCCM, Instance: 10, Counter: 1, DutyKnown: true, Duty: 5})
	if d, known := p.r.Expected(); d != 5 || !known {
		t.Errorf("Expected() = %v, %v; want the request's 5, true", d, known)
	}
	send := func(d Duty) {
		t.Helper()
		parts, err := testKey.AppendDuty(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range parts {
			p.send(t, b)
		}
		p.ask(t, Request{Nonce: 999, Sender: FromAgent})
	}
	big := Duty{Instance: 10, Addrs: manyAddrs(2*dutyPerDatagram + 1)}
	big.Digest = DigestOf(big.Addrs)
	send(big)
	if got := p.r.Duty(); got == nil || got.Digest != big.Digest || len(got.Addrs) != len(big.Addrs) {
		t.Fatalf("Duty() after a duty in 3 parts = %v", got)
	}
	<-taken
	for name, d := range map[string]Duty{
		"an older ccm's": {Instance: 9, Addrs: manyAddrs(1), Digest: DigestOf(manyAddrs(1))},
		"a wrong digest": {Instance: 10, Addrs: manyAddrs(1), Digest: 1},
		"another key's":  {Instance: 11},
	} {
		if name == "another key's" {
			other := mustKey("another key, of the same length: 0123456789\n")
			parts, _ := other.AppendDuty(d)
			p.send(t, parts[0])
			p.ask(t, Request{Nonce: 999, Sender: FromAgent})
		} else {
			send(d)
		}
		if got := p.r.Duty(); got.Digest != big.Digest {
			t.Errorf("%s duty replaced the one held", name)
		}
	}
	empty := Duty{Instance: 10}
	send(empty)
	if got := p.r.Duty(); got == nil || got.Digest != 0 || len(got.Addrs) != 0 {
		t.Errorf("Duty() after an empty duty = %+v", got)
	}
}
