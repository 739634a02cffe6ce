package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"crypto/ed25519"
	"fmt"
	"net/netip"
	"testing"
)

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

// TestResponderTakesDuties checks that a duty list is taken whole, in parts, only from
// the ccm followed, only when its addresses make its digest, and only when that digest is
// the one the ccm's newest request said to expect: a duty sent to another node, or an
// older one arriving late, must not make an agent announce what is not its own.
func TestResponderTakesDuties(t *testing.T) {
	r := newTestResponder(t)
	calls := 0
	r.OnDuty(func() { calls++ })
	ccm := newTalker(r, probe.FromCCM, 10)
	expect := func(d probe.Digest) {
		t.Helper()
		req := ccm.next()
		req.DutyKnown, req.Duty = true, d
		ccm.ask(t, req)
	}
	send := func(key *probe.Key, signer *probe.Signer, d probe.Duty) {
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
	tag := probe.NodeTag("node-a")
	big := probe.Duty{Instance: 10, Seq: 5, To: tag, Addrs: manyAddrs(200)}
	big.Digest = probe.DigestOf(big.Addrs)
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
	rogue := probe.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	for name, d := range map[string]struct {
		key    *probe.Key
		signer *probe.Signer
		duty   probe.Duty
		expect probe.Digest
	}{
		"a ccm not followed":        {testKey, testSigner, probe.Duty{Instance: 9, Seq: 6, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
		"a wrong digest":            {testKey, testSigner, probe.Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: 1}, 1},
		"another key's":             {other, testSigner, probe.Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
		"not the ccm's signature":   {testKey, rogue, probe.Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
		"another node's":            {testKey, testSigner, probe.Duty{Instance: 10, Seq: 6, To: probe.NodeTag("node-b"), Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
		"an older one":              {testKey, testSigner, probe.Duty{Instance: 10, Seq: 4, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
		"a late one, digest of old": {testKey, testSigner, probe.Duty{Instance: 10, Seq: 6, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(manyAddrs(2))},
		"the one held, replayed":    {testKey, testSigner, big, big.Digest},
		// Refused on its head, before its signature is checked: not counted as unsigned,
		// and a flood of such costs no Ed25519 verification each.
		"an older one, not the ccm's": {testKey, rogue, probe.Duty{Instance: 10, Seq: 4, To: tag, Addrs: one, Digest: probe.DigestOf(one)}, probe.DigestOf(one)},
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
	send(testKey, testSigner, probe.Duty{Instance: 10, Seq: 7, To: tag})
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
	ccm := newTalker(r, probe.FromCCM, 10)
	// sent are the requests taken, as sent.
	var sent [][]byte
	ask := func(known bool, d probe.Digest) {
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
		d     probe.Digest
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
