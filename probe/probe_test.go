package probe

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// testKey is a key as an install would make it: the base64 of 32 random bytes.
var testKey = mustKey("pqN1yG3lO2xZ0cB7v8W4eR6tY9uI5oP1aS3dF7gH2jK=\n")

// testSigner is the ccm's signing key in these tests, and testVerifier its public key.
var (
	testSigner   = NewSigner(ed25519.NewKeyFromSeed([]byte("the ccm's key for the probe tests")[:ed25519.SeedSize]))
	testVerifier = testSigner.Verifier()
)

func mustKey(s string) *Key {
	k, err := ParseKey([]byte(s))
	if err != nil {
		panic(err)
	}
	return k
}

func TestEncoding(t *testing.T) {
	req := testKey.AppendRequest(nil, Request{Nonce: 0x0102030405060708, Sender: FromCCM, Instance: 9, Counter: 10, Verdict: 11, DutyKnown: true, Idle: true, Duty: 12, To: 13, Echo: 14})
	want := []byte{'B', 'M', 6, 1, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 11, 3, 0, 0, 0, 0, 0, 0, 0, 12,
		0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 14}
	if len(req) != RequestLen || len(req) != len(want)+macLen || !bytes.HasPrefix(req, want) {
		t.Errorf("request = % x, want % x and a 16-byte code", req, want)
	}
	unable := []Unable{{Pool: "p", Family: iprange.IPv6, Reason: NoAddress, Interface: "eth0"}}
	reply, err := testKey.AppendReply(nil, Reply{Nonce: 0x0102030405060708, Challenge: 7, State: Draining, Node: "node-a", StandsDown: true, ConfirmedOnly: true, TakesIdle: true, Verdict: VerdictRef{Instance: 3, Seq: 4}, CacheVersion: 5, Covers: []uint64{0x62}, CoverSum: ListSum{Len: 300, Digest: 8}, Digest: 6, Unable: unable, UnableSum: ListSum{Len: 2, Digest: 9}})
	if err != nil {
		t.Fatal(err)
	}
	want = []byte{'B', 'M', 6, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 7, 2, 7, 6, 'n', 'o', 'd', 'e', '-', 'a',
		0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 5, 1, 44, 0, 0, 0, 0, 0, 0, 0, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0x62,
		0, 0, 0, 0, 0, 0, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0, 9, 1, 6, 2, 1, 'p', 4, 'e', 't', 'h', '0'}
	if len(reply) != len(want)+macLen || !bytes.HasPrefix(reply, want) {
		t.Errorf("reply = % x, want % x and a 16-byte code", reply, want)
	}
	verdicts, err := testKey.AppendVerdict(testSigner, Verdict{VerdictRef: VerdictRef{Instance: 5, Seq: 6}, Down: []string{"x", "yz"}})
	if err != nil || len(verdicts) != 1 {
		t.Fatalf("AppendVerdict: %d datagrams, %v", len(verdicts), err)
	}
	verdict := verdicts[0]
	want = []byte{'B', 'M', 6, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 1, 0, 2, 1, 'x', 2, 'y', 'z'}
	if len(verdict) != len(want)+sigLen+macLen || !bytes.HasPrefix(verdict, want) || !IsVerdict(verdict) || IsVerdict(req) || IsVerdict(reply) {
		t.Errorf("verdict = % x, want % x, a 64-byte signature and a 16-byte code", verdict, want)
	}
	if !ed25519.Verify(testSigner.key.Public().(ed25519.PublicKey), verdict[:len(want)], verdict[len(want):len(want)+sigLen]) {
		t.Error("the verdict's signature is not the Ed25519 signature of the bytes before it")
	}

	gotReq, err := testKey.ParseRequest(req)
	if err != nil || gotReq != (Request{Nonce: 0x0102030405060708, Sender: FromCCM, Instance: 9, Counter: 10, Verdict: 11, DutyKnown: true, Idle: true, Duty: 12, To: 13, Echo: 14}) {
		t.Errorf("ParseRequest = %+v, %v", gotReq, err)
	}
	gotReply, err := testKey.ParseReply(reply)
	if err != nil || !reflect.DeepEqual(gotReply, Reply{Nonce: 0x0102030405060708, Challenge: 7, State: Draining, Node: "node-a", StandsDown: true, ConfirmedOnly: true, TakesIdle: true, Verdict: VerdictRef{3, 4}, CacheVersion: 5, Covers: []uint64{0x62}, CoverSum: ListSum{Len: 300, Digest: 8}, Digest: 6, Unable: unable, UnableSum: ListSum{Len: 2, Digest: 9}}) {
		t.Errorf("ParseReply = %+v, %v", gotReply, err)
	}
}

// TestAuthentication checks that nothing made without the key, or altered on the way,
// parses: anyone on the network could otherwise keep a dead node up or mark a live one
// down.
func TestAuthentication(t *testing.T) {
	other := mustKey("another key, of the same length: 0123456789\n")
	reply, _ := testKey.AppendReply(nil, Reply{Nonce: 7, State: Ready, Node: "node-a"})
	forged, _ := other.AppendReply(nil, Reply{Nonce: 7, State: Ready, Node: "node-a"})
	if _, err := testKey.ParseReply(forged); !errors.Is(err, ErrAuth) {
		t.Errorf("a reply made with another key: %v, want ErrAuth", err)
	}
	for i := 4; i < len(reply); i++ {
		altered := bytes.Clone(reply)
		altered[i] ^= 1
		if r, err := testKey.ParseReply(altered); err == nil {
			t.Errorf("byte %d altered, parsed as %+v", i, r)
		}
	}
	if _, err := testKey.ParseRequest(other.AppendRequest(nil, Request{Nonce: 7, Sender: FromCCM})); !errors.Is(err, ErrAuth) {
		t.Errorf("a request made with another key: %v, want ErrAuth", err)
	}
	forgedVerdict, _ := other.AppendVerdict(testSigner, Verdict{VerdictRef: VerdictRef{Instance: 1, Seq: 1}, Down: []string{"node-a"}})
	if _, err := testKey.ParseVerdict(testVerifier, forgedVerdict[0]); !errors.Is(err, ErrAuth) {
		t.Errorf("a verdict made with another key: %v, want ErrAuth", err)
	}
	// A key being rolled out: the file lists the new one second, then first.
	rolling := mustKey(string(testKey.keys[0]) + "\n" + string(other.keys[0]) + "\n")
	if _, err := rolling.ParseReply(forged); err != nil {
		t.Errorf("a reply made with the second key of the file: %v", err)
	}
	if _, err := testKey.ParseRequest(rolling.AppendRequest(nil, Request{Nonce: 1, Sender: FromAgent})); err != nil {
		t.Errorf("the first key of the file does not sign: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"", "no probe key"},
		{"\n  \n", "no probe key"},
		{"short\n", "probe key on line 1 is 5 bytes, want at least 32"},
	} {
		if _, err := ParseKey([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseKey(%q) = %v, want an error saying %q", tc.data, err, tc.want)
		}
	}
}

func TestAppendReplyRefuses(t *testing.T) {
	for _, r := range []Reply{
		{State: Ready},
		{State: Ready, Node: strings.Repeat("a", 254)},
		{State: 7, Node: "node-a"},
		{State: Ready, Node: "node-a", Covers: []uint64{1}},
		{State: Ready, Node: "node-a", CoverSum: ListSum{Len: MaxCovers + 1}},
		{State: Ready, Node: "node-a", CoverSum: ListSum{Len: -1}},
		{State: Ready, Node: "node-a", Unable: []Unable{{Pool: "p", Family: iprange.IPv4, Reason: NoUpInterface}}},
		{State: Ready, Node: "node-a", UnableSum: ListSum{Len: MaxUnable + 1}},
		{State: Ready, Node: "node-a", Unable: []Unable{{Pool: "", Family: iprange.IPv4, Reason: NoUpInterface}}, UnableSum: ListSum{Len: 1}},
	} {
		if _, err := testKey.AppendReply(nil, r); err == nil {
			t.Errorf("AppendReply(%+v) succeeded", r)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := testKey.AppendReply(nil, Reply{Nonce: 9, State: Ready, Node: "n1"})
	// sealed authenticates a made-up body, so that what is checked is its format.
	sealed := func(parts ...[]byte) []byte { return testKey.seal(bytes.Join(parts, nil)) }
	header := good[:20]             // and the challenge
	noVerdict := make([]byte, 16+8) // and no cache version
	noDigest := make([]byte, 8)
	noCovers := make([]byte, 2+8+1)
	unableOf := func(n byte) []byte { return append([]byte{n}, make([]byte, 8)...) }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:11], "11 bytes, want at least 20"},
		{"magic", append([]byte("XM"), good[2:]...), "magic 0x584d"},
		{"version", append([]byte{'B', 'M', 3}, good[3:]...), "version 3, want 6"},
		{"request as reply", testKey.AppendRequest(nil, Request{Sender: FromCCM}), "type 1, want 2"},
		{"no state", sealed(header), "datagram of 36 bytes ends inside a field"},
		{"state", sealed(header, []byte{4, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(0), []byte{0}), "unknown state(4)"},
		{"no flags", sealed(header, []byte{1}), "datagram of 37 bytes ends inside a field"},
		{"empty name", sealed(header, []byte{1, 0, 0}, noVerdict, noCovers), "node name of 0 bytes"},
		{"truncated name", sealed(header, []byte{1, 0, 2, 'n'}), "datagram of 40 bytes ends inside a field"},
		{"no covers count", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict), "ends inside a field"},
		{"truncated covers", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, []byte{0, 2}, make([]byte, 8), []byte{2}, make([]byte, 12)), "ends inside a field"},
		{"extra byte", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(0), []byte{0, 0}), "1 bytes after the end of a reply"},
		{"no unable count", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest), "ends inside a field"},
		{"no unable share", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(0)), "ends inside a field"},
		{"too many unable", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(MaxUnable+1), []byte{0}), "naming 65 pools and families"},
		{"unable share over its list", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(1), []byte{2}), "carrying 2 of 1 pools and families"},
		{"unknown family", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(1), []byte{1, 5, 1, 1, 'p', 0}), "unknown family 5"},
		{"unknown reason", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, noCovers, noDigest, unableOf(1), []byte{1, 4, 3, 1, 'p', 0}), "unknown reason 3"},
		{"covers share over its list", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, []byte{0, 1}, make([]byte, 8), []byte{2}, make([]byte, 16)), "carrying 2 of 1 covered nodes"},
		{"too long", sealed(header, []byte{1, 0, 2, 'n', '1'}, noVerdict, []byte{0, 200}, make([]byte, 8), []byte{143}, make([]byte, 143*8), noDigest, unableOf(0), []byte{0}), "a reply of 1238 bytes, at most 1232"},
		{"long name", sealed(header, []byte{1, 0, 254}, bytes.Repeat([]byte{'a'}, 254), noVerdict, noCovers), "node name of 254 bytes"},
	} {
		_, err := testKey.ParseReply(tc.b)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParseReply(% x) = %v, want an ErrFormat saying %q", tc.name, tc.b, err, tc.want)
		}
	}
	if _, err := testKey.ParseRequest(good); err == nil {
		t.Error("ParseRequest accepted a reply")
	}
	if _, err := testKey.ParseRequest(testKey.AppendRequest(nil, Request{Nonce: 1, Sender: 3})); !errors.Is(err, ErrFormat) {
		t.Errorf("a request of an unknown sender: %v, want ErrFormat", err)
	}
	// Flag bits this version does not know: the request would not encode back the same.
	req := testKey.AppendRequest(nil, Request{Nonce: 1, Sender: FromCCM, DutyKnown: true})
	body := bytes.Clone(req[:len(req)-macLen])
	body[37] |= 0x30
	if _, err := testKey.ParseRequest(testKey.seal(body)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "unknown request flags 0x30") {
		t.Errorf("a request with unknown flag bits: %v, want an ErrFormat naming them", err)
	}
}

// FuzzParse checks that no datagram makes a parser panic, and that what parses encodes
// back to the same datagram. Most inputs fail the code check; the fuzzer's input is
// sealed once more as it is, so that the decoders behind the check are fuzzed as well.
func FuzzParse(f *testing.F) {
	f.Add(testKey.AppendRequest(nil, Request{Nonce: 1, Sender: FromCCM, Instance: 2, Counter: 3, Verdict: 4}))
	reply, _ := testKey.AppendReply(nil, Reply{Nonce: 1, State: Ready, Node: "node-a", Verdict: VerdictRef{1, 2}, Covers: []uint64{NodeTag("b"), NodeTag("c")}, CoverSum: ListSum{Len: 3, Digest: 4},
		Unable: []Unable{{Pool: "p", Family: iprange.IPv6, Reason: NoAddress, Interface: "eth0"}}, UnableSum: ListSum{Len: 1, Digest: 5}})
	f.Add(reply)
	// A reply longer than any sender makes: a seed, so that the fuzzer does not spend its
	// time minimizing a long input that first takes that branch.
	f.Add(testKey.seal(append([]byte{'B', 'M', Version, typeReply}, make([]byte, MaxUnfragmented)...)))
	verdict, _ := testKey.AppendVerdict(testSigner, Verdict{VerdictRef: VerdictRef{1, 2}, Down: []string{"a", "b"}})
	f.Add(verdict[0])
	duty, _ := testKey.AppendDuty(testSigner, Duty{Instance: 1, Seq: 2, To: 3, Digest: 4, Addrs: manyAddrs(3)})
	f.Add(duty[0])
	f.Add([]byte("BM\x06\x03"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Sealed, and signed then sealed, so that the decoders behind both checks are fuzzed.
		for _, in := range [][]byte{b, testKey.seal(bytes.Clone(b)), testKey.seal(testSigner.sign(bytes.Clone(b)))} {
			if r, err := testKey.ParseReply(in); err == nil {
				// Flag bits this version does not know are not kept: compare what parses.
				if out, err := testKey.AppendReply(nil, r); err == nil {
					if again, err := testKey.ParseReply(out); err != nil || !reflect.DeepEqual(again, r) {
						t.Errorf("reply %+v parsed from % x encodes as % x, which parses as %+v, %v", r, in, out, again, err)
					}
				}
			}
			if r, err := testKey.ParseRequest(in); err == nil && !bytes.Equal(in, testKey.AppendRequest(nil, r)) {
				t.Errorf("request %+v parsed from % x does not encode back", r, in)
			}
			// A datagram that is the whole of its message encodes back to itself.
			if v, err := testKey.ParseVerdict(testVerifier, in); err == nil {
				if !IsVerdict(in) {
					t.Errorf("verdict %+v parsed from % x, which IsVerdict denies", v, in)
				}
				if out, err := testKey.AppendVerdict(testSigner, v.Verdict); err == nil && v.Parts == 1 && (len(out) != 1 || !bytes.Equal(in, out[0])) {
					t.Errorf("verdict %+v parsed from % x encodes as % x", v, in, out)
				}
			}
			if d, err := testKey.ParseDuty(testVerifier, in); err == nil {
				if !IsDuty(in) {
					t.Errorf("duty %+v parsed from % x, which IsDuty denies", d, in)
				}
				if out, err := testKey.AppendDuty(testSigner, d.Duty); err == nil && d.Parts == 1 && (len(out) != 1 || !bytes.Equal(in, out[0])) {
					t.Errorf("duty %+v parsed from % x encodes as % x", d, in, out)
				}
			}
		}
	})
}
