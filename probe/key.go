package probe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"sync"
)

// MinKeyLen is the shortest key accepted, in bytes: 32 bytes of text, such as the base64
// of 24 random bytes, or more.
const MinKeyLen = 32

// macLen is the length of the message authentication code that ends every datagram: the
// first 16 bytes of HMAC-SHA256, which no one can guess in the lifetime of a nonce.
const macLen = 16

// Key authenticates probe datagrams. The ccm and every agent read the same key file, so
// that no one else on the network can keep a dead node up, mark a live one down, or learn
// anything from an agent. A Key is safe for concurrent use.
type Key struct {
	// keys are the key file's keys: the first signs, any verifies, so that a new key can
	// be rolled out before it signs.
	keys [][]byte
	// macs hold a keyed HMAC of each key for reuse: keying one costs more than coding a
	// datagram, and the ccm codes tens of thousands a second.
	macs []sync.Pool
}

// ErrAuth is wrapped by the error about a datagram whose code is not made with a key of
// the file.
var ErrAuth = errors.New("probe datagram not authenticated")

// ParseKey reads keys, one per line: the first signs, every one verifies. Blank lines and
// the spaces around a key are ignored.
func ParseKey(data []byte) (*Key, error) {
	k := &Key{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) < MinKeyLen {
			return nil, fmt.Errorf("probe key on line %d is %d bytes, want at least %d (for example: head -c 32 /dev/urandom | base64)", i+1, len(line), MinKeyLen)
		}
		k.keys = append(k.keys, bytes.Clone(line))
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("no probe key: want at least one line of %d bytes or more", MinKeyLen)
	}
	k.macs = make([]sync.Pool, len(k.keys))
	for i, key := range k.keys {
		k.macs[i].New = func() any { return hmac.New(sha256.New, key) }
	}
	return k, nil
}

// LoadKey reads the key file at path.
func LoadKey(path string) (*Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the probe key: %w", err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// seal appends the code of b, made with the signing key.
func (k *Key) seal(b []byte) []byte {
	m := k.macs[0].Get().(hash.Hash)
	defer k.macs[0].Put(m)
	m.Reset()
	m.Write(b)
	return m.Sum(b)[:len(b)+macLen]
}

// open checks that b ends in a code made with one of the keys, and returns b without it.
func (k *Key) open(b []byte) ([]byte, error) {
	if len(b) < macLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrFormat, len(b), macLen)
	}
	body, code := b[:len(b)-macLen], b[len(b)-macLen:]
	var sum [sha256.Size]byte
	for i := range k.keys {
		m := k.macs[i].Get().(hash.Hash)
		m.Reset()
		m.Write(body)
		ok := hmac.Equal(m.Sum(sum[:0])[:macLen], code)
		k.macs[i].Put(m)
		if ok {
			return body, nil
		}
	}
	return nil, ErrAuth
}
