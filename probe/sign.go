package probe

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
)

// sigLen is the length of the Ed25519 signature that verdicts and duties carry before
// their code.
const sigLen = ed25519.SignatureSize

// A Signer signs the ccm's verdicts and duty lists with a private key only the ccm holds:
// the probe key, which every agent holds, authenticates a datagram as coming from the
// cluster; the signature, as coming from the ccm. So root on one node, who can read the
// probe key, still cannot name another node down or hand an agent another node's duty.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner returns a Signer of the private key k.
func NewSigner(k ed25519.PrivateKey) *Signer { return &Signer{key: k} }

// Verifier returns a Verifier of s's public key alone.
func (s *Signer) Verifier() *Verifier {
	return &Verifier{keys: []ed25519.PublicKey{s.key.Public().(ed25519.PublicKey)}}
}

// sign appends the signature of b to b.
func (s *Signer) sign(b []byte) []byte { return append(b, ed25519.Sign(s.key, b)...) }

// A Verifier checks the ccm's signature on verdicts and duty lists with any of a list of
// public keys, so that a new key can be rolled out to the agents before the ccm signs
// with it. It is safe for concurrent use.
type Verifier struct {
	keys []ed25519.PublicKey

	// checked are the last signed bodies found good, so that the same datagram heard
	// again costs a comparison instead of an Ed25519 verification (tens of microseconds):
	// the ccm sends a verdict again to an agent whose reply shows it missed it, and a
	// process that answers for many nodes with one Verifier hears each broadcast once
	// per node. Only bytes equal to ones verified match: nothing is taken on trust.
	mu      sync.Mutex
	checked [checkedBodies][]byte
	next    int
}

// checkedBodies is how many signed bodies a Verifier remembers: the parts of a verdict
// that names some hundreds of nodes down fit.
const checkedBodies = 8

// ErrSignature is wrapped by the error about an authenticated verdict or duty that no
// public key of the Verifier's signed: made by someone who holds the probe key but not the
// ccm's private key, such as root on a node.
var ErrSignature = errors.New("probe datagram not signed by the ccm")

// open checks that body ends in a signature of one of v's keys, and returns it without.
func (v *Verifier) open(body []byte) ([]byte, error) {
	if len(body) < sigLen {
		return nil, fmt.Errorf("%w: %d bytes, no room for a signature", ErrFormat, len(body))
	}
	msg, sig := body[:len(body)-sigLen], body[len(body)-sigLen:]
	if v.wasChecked(body) {
		return msg, nil
	}
	for _, k := range v.keys {
		if ed25519.Verify(k, msg, sig) {
			v.mu.Lock()
			v.checked[v.next] = append(v.checked[v.next][:0], body...)
			v.next = (v.next + 1) % len(v.checked)
			v.mu.Unlock()
			return msg, nil
		}
	}
	return nil, ErrSignature
}

// wasChecked reports whether body is one of the signed bodies last found good.
func (v *Verifier) wasChecked(body []byte) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.checked {
		if bytes.Equal(c, body) {
			return true
		}
	}
	return false
}

// ParseSigner reads an Ed25519 private key in a PEM block "PRIVATE KEY" (PKCS #8), as
// `openssl genpkey -algorithm ed25519` writes it.
func ParseSigner(data []byte) (*Signer, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New(`no PEM block "PRIVATE KEY": want an Ed25519 key, as made by: openssl genpkey -algorithm ed25519`)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, fmt.Errorf("a second PEM block %q after the private key: the ccm signs with one key", next.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the private key is a %T, want Ed25519 (openssl genpkey -algorithm ed25519)", k)
	}
	return NewSigner(ek), nil
}

// ParseVerifier reads one or more Ed25519 public keys, each a PEM block "PUBLIC KEY", as
// `openssl pkey -pubout` writes them: any of them verifies.
func ParseVerifier(data []byte) (*Verifier, error) {
	v := &Verifier{}
	for i := 1; ; i++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %d is %q, want \"PUBLIC KEY\": the agents hold the ccm's public keys only", i, block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", i, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("PEM block %d is a %T public key, want Ed25519", i, k)
		}
		v.keys = append(v.keys, ek)
	}
	if len(v.keys) == 0 {
		return nil, errors.New(`no PEM block "PUBLIC KEY": want the ccm's Ed25519 public key, as made by: openssl pkey -in verdict.key -pubout`)
	}
	return v, nil
}

// LoadSigner reads the ccm's private key file at path.
func LoadSigner(path string) (*Signer, error) {
	s, err := loadPEM(path, ParseSigner)
	if err != nil {
		return nil, fmt.Errorf("reading the verdict signing key: %w", err)
	}
	return s, nil
}

// LoadVerifier reads the file of the ccm's public keys at path.
func LoadVerifier(path string) (*Verifier, error) {
	v, err := loadPEM(path, ParseVerifier)
	if err != nil {
		return nil, fmt.Errorf("reading the ccm's verdict public keys: %w", err)
	}
	return v, nil
}

func loadPEM[T any](path string, parse func([]byte) (T, error)) (T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, err
	}
	t, err := parse(data)
	if err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
