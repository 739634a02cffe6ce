package probe

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// roundTrip is one datagram of each type, encoded, with a parse that returns what it
// decoded.
type roundTrip struct {
	name  string
	b     []byte
	want  any
	parse func([]byte) (any, error)
	// signed says the body ends in the ccm's signature, before the code.
	signed bool
}

// reseal makes a datagram of body as rt's encoder would: signed if rt's is, then sealed.
func (rt roundTrip) reseal(body []byte) []byte {
	if rt.signed {
		body = testSigner.sign(body)
	}
	return testKey.seal(body)
}

// body returns what rt.b's signature, if any, and code are made of.
func (rt roundTrip) body() []byte {
	if rt.signed {
		return rt.b[:len(rt.b)-sigLen-macLen]
	}
	return rt.b[:len(rt.b)-macLen]
}

// roundTrips encodes a request, a reply with covers and a verdict of many nodes.
func roundTrips(t *testing.T) []roundTrip {
	t.Helper()
	req := Request{Nonce: 1 << 60, Sender: FromCCM, Instance: 1_700_000_000_000_000_000, Counter: 42, Verdict: 7}
	var covers []uint64
	for i := range 100 {
		covers = append(covers, NodeTag(fmt.Sprintf("covered-%02d", i)))
	}
	unable := []Unable{{Pool: "public", Family: iprange.IPv6, Reason: NoAddress, Interface: "eth0"}}
	reply := Reply{Nonce: 3, State: Ready, Node: strings.Repeat("n", MaxNodeName), Verdict: VerdictRef{Instance: 8, Seq: 9}, Covers: covers, CoverSum: ListSum{Len: 300, Digest: 1},
		Unable: unable, UnableSum: ListSum{Len: 2, Digest: 2}}
	down := make([]string, 40)
	for i := range down {
		down[i] = fmt.Sprintf("rack-%02d-node-%04d", i/100, i)
	}
	verdict := VerdictPart{Verdict: Verdict{VerdictRef: VerdictRef{Instance: 5, Seq: 1 << 40}, Down: down}, Parts: 1}
	duty := DutyPart{Duty: Duty{Instance: 5, Seq: 6, To: NodeTag("node-a"), Addrs: manyAddrs(50)}, Parts: 1}
	duty.Digest = DigestOf(duty.Addrs)

	replyBytes, err := testKey.AppendReply(nil, reply)
	if err != nil {
		t.Fatal(err)
	}
	verdictBytes, err := testKey.AppendVerdict(testSigner, verdict.Verdict)
	if err != nil || len(verdictBytes) != 1 {
		t.Fatalf("AppendVerdict: %d datagrams, %v", len(verdictBytes), err)
	}
	dutyBytes, err := testKey.AppendDuty(testSigner, duty.Duty)
	if err != nil || len(dutyBytes) != 1 {
		t.Fatalf("AppendDuty: %d datagrams, %v", len(dutyBytes), err)
	}
	return []roundTrip{
		{"request", testKey.AppendRequest(nil, req), req, func(b []byte) (any, error) { return testKey.ParseRequest(b) }, false},
		{"reply", replyBytes, reply, func(b []byte) (any, error) { return testKey.ParseReply(b) }, false},
		{"verdict", verdictBytes[0], verdict, func(b []byte) (any, error) { return testKey.ParseVerdict(testVerifier, b) }, true},
		{"duty", dutyBytes[0], duty, func(b []byte) (any, error) { return testKey.ParseDuty(testVerifier, b) }, true},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, rt := range roundTrips(t) {
		got, err := rt.parse(rt.b)
		if err != nil || !reflect.DeepEqual(got, rt.want) {
			t.Errorf("%s: parsed %+v, %v; want %+v", rt.name, got, err, rt.want)
		}
		if IsVerdict(rt.b) != (rt.name == "verdict") {
			t.Errorf("%s: IsVerdict = %v", rt.name, IsVerdict(rt.b))
		}
	}
	// Appending to a buffer that holds something keeps it, and encodes the same.
	prefix := []byte("kept")
	b := testKey.AppendRequest(bytes.Clone(prefix), Request{Nonce: 1, Sender: FromAgent})
	if r, err := testKey.ParseRequest(b[len(prefix):]); !bytes.HasPrefix(b, prefix) || err != nil || r.Sender != FromAgent {
		t.Errorf("AppendRequest after a prefix: % x parses as %+v, %v", b, r, err)
	}
}

// TestTamperedDatagramsAreNotAuthentic flips each byte after the header of each type: the
// code must catch every change.
func TestTamperedDatagramsAreNotAuthentic(t *testing.T) {
	for _, rt := range roundTrips(t) {
		for _, i := range []int{4, 12, 13, len(rt.b) / 2, len(rt.b) - macLen - 1, len(rt.b) - 1} {
			altered := bytes.Clone(rt.b)
			altered[i] ^= 0x40
			if got, err := rt.parse(altered); !errors.Is(err, ErrAuth) {
				t.Errorf("%s with byte %d of %d altered: %+v, %v; want ErrAuth", rt.name, i, len(rt.b), got, err)
			}
		}
	}
}

// TestTruncatedOrExtendedDatagrams checks that a body cut short or followed by more bytes,
// though authenticated, is an ErrFormat: fields of a later version must not be taken for
// this one's, nor missing fields for zeros.
func TestTruncatedOrExtendedDatagrams(t *testing.T) {
	for _, rt := range roundTrips(t) {
		body := rt.body()
		for _, cut := range []int{1, 8, len(body) - headerLen} {
			b := rt.reseal(bytes.Clone(body[:len(body)-cut]))
			if got, err := rt.parse(b); !errors.Is(err, ErrFormat) {
				t.Errorf("%s cut by %d bytes: %+v, %v; want ErrFormat", rt.name, cut, got, err)
			}
		}
		b := rt.reseal(append(bytes.Clone(body), 0))
		if got, err := rt.parse(b); !errors.Is(err, ErrFormat) || !strings.Contains(fmt.Sprint(err), "1 bytes after the end") {
			t.Errorf("%s with a byte more: %+v, %v; want ErrFormat", rt.name, got, err)
		}
		// Unsealed, a datagram cut short is no datagram at all.
		if got, err := rt.parse(rt.b[:headerLen+macLen-1]); !errors.Is(err, ErrFormat) {
			t.Errorf("%s of %d bytes: %+v, %v; want ErrFormat", rt.name, headerLen+macLen-1, got, err)
		}
	}
}

// TestAppendVerdictRefuses checks the verdicts that cannot be sent: a bad name, or more
// nodes than MaxParts datagrams hold.
func TestAppendVerdictRefuses(t *testing.T) {
	huge := make([]string, MaxParts*MaxUnfragmented/(MaxNodeName+1))
	for i := range huge {
		huge[i] = fmt.Sprintf("%0253d", i)
	}
	for name, v := range map[string]Verdict{
		"empty name":    {Down: []string{"a", ""}},
		"long name":     {Down: []string{strings.Repeat("a", MaxNodeName+1)}},
		"too many down": {Down: huge},
	} {
		if b, err := testKey.AppendVerdict(testSigner, v); err == nil {
			t.Errorf("%s: AppendVerdict = %d datagrams, want an error", name, len(b))
		}
	}
}

func TestVerdictRefReplaces(t *testing.T) {
	for _, tc := range []struct {
		r, o VerdictRef
		want bool
	}{
		{VerdictRef{1, 2}, VerdictRef{1, 1}, true},
		{VerdictRef{1, 1}, VerdictRef{}, true},
		{VerdictRef{1, 1}, VerdictRef{1, 1}, false},
		{VerdictRef{1, 1}, VerdictRef{1, 2}, false},
		// Instances have no order: another one's is the new ccm's.
		{VerdictRef{2, 1}, VerdictRef{1, 9}, true},
		{VerdictRef{1, 9}, VerdictRef{2, 1}, true},
	} {
		if got := tc.r.Replaces(tc.o); got != tc.want {
			t.Errorf("%+v.Replaces(%+v) = %v, want %v", tc.r, tc.o, got, tc.want)
		}
	}
}
