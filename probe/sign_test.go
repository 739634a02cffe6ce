package probe

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readFile returns a file of testdata, made with openssl as docs/install.md says.
func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVerdictKeyRotation checks the rotation docs/install.md describes: the agents hold the old
// and the new public key while the ccm moves to the new private key, then the new alone.
func TestVerdictKeyRotation(t *testing.T) {
	old, err := ParseSigner(readFile(t, "verdict.key"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := ParseSigner(readFile(t, "verdict-new.key"))
	if err != nil {
		t.Fatal(err)
	}
	both, err := ParseVerifier(append(readFile(t, "verdict.pub"), readFile(t, "verdict-new.pub")...))
	if err != nil {
		t.Fatal(err)
	}
	newOnly, err := ParseVerifier(readFile(t, "verdict-new.pub"))
	if err != nil {
		t.Fatal(err)
	}
	v := Verdict{VerdictRef: VerdictRef{Instance: 1, Seq: 2}, Down: []string{"node-b"}}
	for _, tc := range []struct {
		name   string
		signer *Signer
		agents *Verifier
		want   error
	}{
		{"old key, both public keys", old, both, nil},
		{"new key, both public keys", next, both, nil},
		{"new key, new public key", next, newOnly, nil},
		{"old key after the rotation", old, newOnly, ErrSignature},
	} {
		parts, err := testKey.AppendVerdict(tc.signer, v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testKey.ParseVerdict(tc.agents, parts[0]); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestVerifierRemembersOnlyWhatItChecked checks that the signed bodies a Verifier
// remembers, to spare checking the same datagram twice, never pass anything else: not the
// same message with another signature, nor a signature altered by a bit.
func TestVerifierRemembersOnlyWhatItChecked(t *testing.T) {
	v := testSigner.Verifier()
	rogue := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	verdict := Verdict{VerdictRef: VerdictRef{Instance: 1, Seq: 2}, Down: []string{"node-b"}}
	good, err := testKey.AppendVerdict(testSigner, verdict)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := testKey.AppendVerdict(rogue, verdict)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // checked, then remembered
		if _, err := testKey.ParseVerdict(v, good[0]); err != nil {
			t.Fatalf("the ccm's verdict: %v", err)
		}
	}
	body, err := testKey.open(good[0])
	if err != nil {
		t.Fatal(err)
	}
	flipped := slices.Clone(body)
	flipped[len(flipped)-1] ^= 1
	for name, b := range map[string][]byte{"another signer's": forged[0], "altered": testKey.seal(flipped)} {
		if _, err := testKey.ParseVerdict(v, b); !errors.Is(err, ErrSignature) {
			t.Errorf("the same verdict, %s signature: %v, want %v", name, err, ErrSignature)
		}
	}
}

// TestParseKeysRefuses checks that a wrong file is refused at start, naming what is wrong,
// rather than making an agent that takes no verdict or a ccm whose verdicts none takes.
func TestParseKeysRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"the public key as the private": {readFile(t, "verdict.pub"), `no PEM block "PRIVATE KEY"`},
		"an ECDSA key":                  {readFile(t, "ecdsa.key"), "want Ed25519"},
		"two private keys":              {append(readFile(t, "verdict.key"), readFile(t, "verdict-new.key")...), "second PEM block"},
		"nothing":                       {nil, `no PEM block "PRIVATE KEY"`},
	} {
		if _, err := ParseSigner(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSigner of %s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"the private key as the public": {readFile(t, "verdict.key"), `PEM block 1 is "PRIVATE KEY"`},
		"an ECDSA public key":           {readFile(t, "ecdsa.pub"), "want Ed25519"},
		"nothing":                       {[]byte("\n"), `no PEM block "PUBLIC KEY"`},
	} {
		if _, err := ParseVerifier(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseVerifier of %s: %v, want an error saying %q", name, err, tc.want)
		}
	}
	if _, err := LoadSigner(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "verdict signing key") {
		t.Errorf("LoadSigner of a missing file: %v", err)
	}
	if s, err := ParseSigner(bytes.TrimSpace(readFile(t, "verdict.key"))); err != nil || s == nil {
		t.Errorf("a key without its last newline: %v", err)
	}
}
