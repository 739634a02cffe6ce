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
	for _, n := range []int{0, 1, 60, 61, 200, 5000} {
		d := Duty{Instance: 7, Seq: 8, To: NodeTag("node-a"), Addrs: manyAddrs(n)}
		d.Digest = DigestOf(d.Addrs)
		parts, err := testKey.AppendDuty(testSigner, d)
		if err != nil {
			t.Fatal(err)
		}
		if min := n * 11 / MaxUnfragmented; len(parts) < max(1, min) {
			t.Errorf("%d addresses in %d datagrams, want at least %d", n, len(parts), min)
		}
		var got []netip.Addr
		for i, b := range parts {
			if len(b) > MaxUnfragmented || !IsDuty(b) || IsVerdict(b) {
				t.Fatalf("part %d: %d bytes (at most %d), IsDuty %v", i, len(b), MaxUnfragmented, IsDuty(b))
			}
			p, err := testKey.ParseDuty(testVerifier, b)
			if err != nil || p.Part != i || p.Parts != len(parts) || p.Instance != 7 || p.Seq != 8 || p.To != d.To || p.Digest != d.Digest {
				t.Fatalf("part %d: %+v, %v", i, p, err)
			}
			got = append(got, p.Addrs...)
		}
		if len(got) != n || (n > 0 && !reflect.DeepEqual(got, d.Addrs)) {
			t.Errorf("%d addresses came back as %d", n, len(got))
		}
		parts[0][len(parts[0])/2] ^= 1
		if _, err := testKey.ParseDuty(testVerifier, parts[0]); !errors.Is(err, ErrAuth) {
			t.Errorf("an altered duty parses: %v", err)
		}
	}
}
