package probe

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// refusalLen is the length of a refusal: the header and the refused request's nonce.
const refusalLen = headerLen + 8

// A refusal is what a responder answers, at most once a second, to a request that is one
// in form but whose code does not check: most often a ccm and an agent with two keys, a
// fault the ccm would otherwise see only as an agent that never answers. It carries no
// code, since the two sides share no key; so it is no more than a hint, and a prober only
// logs and counts it, and only for a nonce it waits for.
//
//	refusal, 12 bytes:
//	  4   8  the nonce of the request refused

// AppendRefusal appends a refusal of the request with nonce to b.
func AppendRefusal(b []byte, nonce uint64) []byte {
	b = append(b, magic[0], magic[1], Version, typeRefusal)
	return binary.BigEndian.AppendUint64(b, nonce)
}

// IsRefusal reports whether b claims to be a refusal of this version.
func IsRefusal(b []byte) bool {
	return len(b) == refusalLen && b[0] == magic[0] && b[1] == magic[1] && b[2] == Version && b[3] == typeRefusal
}

// ParseRefusal returns the nonce of the request a refusal refuses.
func ParseRefusal(b []byte) (uint64, error) {
	if !IsRefusal(b) {
		return 0, fmt.Errorf("%w: not a refusal of %d bytes", ErrFormat, refusalLen)
	}
	return binary.BigEndian.Uint64(b[headerLen:]), nil
}

// RequestNonce returns the nonce of a datagram that has the form of a request of this
// version, whatever its code.
func RequestNonce(b []byte) (uint64, bool) {
	if len(b) != RequestLen || checkHeader(b, typeRequest) != nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[headerLen:]), true
}

// AuthLog logs datagrams made with another key: the first at once, then at most one line
// every AuthLogEvery with how many came since, so that a wrong key shows in the logs of
// both sides within a second and a flood of them does not flood the logs. The zero value
// is ready to use.
type AuthLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

// AuthLogEvery is how often an AuthLog logs at most.
const AuthLogEvery = 10 * time.Second

// Log logs msg with keysAndValues, or counts it for the next line.
func (l *AuthLog) Log(msg string, keysAndValues ...any) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < AuthLogEvery {
		l.missed++
		l.mu.Unlock()
		return
	}
	missed := l.missed
	l.last, l.missed = now, 0
	l.mu.Unlock()
	klog.InfoS(msg, append(keysAndValues, "alikeSinceLastLine", missed)...)
}
