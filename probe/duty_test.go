package probe

import (
	"crypto/ed25519"
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
	send := func(key *Key, signer *Signer, d Duty) {
		t.Helper()
		parts, err := key.AppendDuty(signer, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range parts {
			if _, ok := r.Handle(b, nil); ok {
				t.Fatal("a duty was answered")
			}
		}
	}
	tag := NodeTag("node-a")
	big := Duty{Instance: 10, Seq: 5, To: tag, Addrs: manyAddrs(200)}
	big.Digest = DigestOf(big.Addrs)
	ccm.ask(t, ccm.next()) // a challenge to echo
	expect(big.Digest)
	if d, known := r.Expected(); d != big.Digest || !known {
		t.Errorf("Expected() = %v, %v; want the request's %v, true", d, known, big.Digest)
	}
	send(testKey, testSigner, big)
	if got := r.Duty(); got == nil || got.Digest != big.Digest || len(got.Addrs) != len(big.Addrs) || calls != 1 {
		t.Fatalf("Duty() after a duty in parts = %v", got)
	}
	one := manyAddrs(1)
	other := mustKey("another key, of the same length: 0123456789\n")
	// Root on a node holds the probe key, not the ccm's private key.
	rogue := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	for name, d := range map[string]struct {
		key    *Key
		signer *Signer
		duty   Duty
		expect Digest
	}{
		"a ccm not followed":        {testKey, testSigner, Duty{Instance: 9, Seq: 6, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"a wrong digest":            {testKey, testSigner, Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: 1}, 1},
		"another key's":             {other, testSigner, Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"not the ccm's signature":   {testKey, rogue, Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"another node's":            {testKey, testSigner, Duty{Instance: 10, Seq: 6, To: NodeTag("node-b"), Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"an older one":              {testKey, testSigner, Duty{Instance: 10, Seq: 4, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
		"a late one, digest of old": {testKey, testSigner, Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(manyAddrs(2))},
		"the one held, replayed":    {testKey, testSigner, big, big.Digest},
		// Refused on its head, before its signature is checked: not counted as unsigned,
		// and a flood of such costs no Ed25519 verification each.
		"an older one, not the ccm's": {testKey, rogue, Duty{Instance: 10, Seq: 4, To: tag, Addrs: one, Digest: DigestOf(one)}, DigestOf(one)},
	} {
		expect(d.expect)
		send(d.key, d.signer, d.duty)
		if got := r.Duty(); got.Digest != big.Digest {
			t.Errorf("%s duty replaced the one held", name)
		}
	}
	if st := r.Stats(); st.Unsigned != 1 || calls != 1 {
		t.Errorf("Unsigned = %d, OnDuty called %d times; want 1 (the newer duty not signed by the ccm; the older one is refused before its signature) and 1", st.Unsigned, calls)
	}
	expect(0)
	send(testKey, testSigner, Duty{Instance: 10, Seq: 7, To: tag})
	if got := r.Duty(); got == nil || got.Digest != 0 || len(got.Addrs) != 0 || calls != 2 {
		t.Errorf("Duty() after an empty duty = %+v", got)
	}
}

// TestResponderOnExpected checks that the agent is told when the duty digest the ccm
// expects changes, and only then: its duty check sleeps until told, so a change missed
// would leave a view that differs from the ccm's unnoticed until the next sync.
func TestResponderOnExpected(t *testing.T) {
	r := newTestResponder(t)
	calls := 0
	r.OnExpected(func() { calls++ })
	ccm := newTalker(r, FromCCM, 10)
	// sent are the requests taken, as sent.
	var sent [][]byte
	ask := func(known bool, d Digest) {
		t.Helper()
		req := ccm.next()
		req.DutyKnown, req.Duty = known, d
		b := testKey.AppendRequest(nil, req)
		if _, ok := ccm.send(t, b); !ok {
			t.Fatalf("no reply to %+v", req)
		}
		sent = append(sent, b)
	}
	ccm.ask(t, ccm.next()) // a challenge to echo
	for i, step := range []struct {
		known bool
		d     Digest
		calls int
	}{
		{true, 7, 1},  // a digest to expect
		{true, 7, 1},  // the same again: nothing changed
		{true, 8, 2},  // another
		{false, 8, 3}, // a ccm that knows none now
		{false, 8, 3},
		{true, 8, 4}, // known again
	} {
		ask(step.known, step.d)
		if calls != step.calls {
			t.Errorf("step %d (known %v, digest %v): %d calls, want %d", i, step.known, step.d, calls, step.calls)
		}
	}

	// Requests the ccm did not send now change nothing: the first one replayed (digest
	// 7), one reordered behind the last (an older counter, another digest), and one
	// sealed with another key.
	other := mustKey("another key, of the same length: 0123456789\n")
	reordered := ccm.next()
	reordered.Counter, reordered.DutyKnown, reordered.Duty = reordered.Counter-2, true, 9
	forged := ccm.next()
	forged.DutyKnown, forged.Duty = true, 10
	for _, in := range []struct {
		name string
		b    []byte
	}{
		{"replayed", sent[0]},
		{"reordered", testKey.AppendRequest(nil, reordered)},
		{"forged", other.AppendRequest(nil, forged)},
	} {
		r.Handle(in.b, nil)
		if d, known := r.Expected(); calls != 4 || d != 8 || !known {
			t.Fatalf("after a %s request: %d calls, expected digest %v (known %v); want 4 calls and 8 still", in.name, calls, d, known)
		}
	}
	ask(true, 11)
	if calls != 5 {
		t.Errorf("after a new digest from the ccm: %d calls, want 5", calls)
	}
}
