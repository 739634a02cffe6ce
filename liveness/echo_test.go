package liveness

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// The signs of life a busy agent shows (echo replies, late answers, port unreachable)
// come from the network, and anyone on it may send them. These tests forge, replay and
// reorder them: none keeps a dead agent up, nor takes a live one down. None of them
// carries a time either: the prober orders and times everything by its own monotonic
// clock, so a node's clock, right or wrong, has no say.

// TestParseEchoReply checks that only an echo reply carrying a nonce is taken.
func TestParseEchoReply(t *testing.T) {
	const nonce = 0x0102030405060708
	data := binary.BigEndian.AppendUint64(nil, nonce)
	marshal := func(typ icmp.Type, data []byte) []byte {
		b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: 1, Seq: 2, Data: data}}).Marshal(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		proto int
		b     []byte
		ok    bool
	}{
		{"IPv4 reply", 1, marshal(ipv4.ICMPTypeEchoReply, data), true},
		{"IPv6 reply", 58, marshal(ipv6.ICMPTypeEchoReply, data), true},
		{"IPv4 request", 1, marshal(ipv4.ICMPTypeEcho, data), false},
		{"IPv6 request", 58, marshal(ipv6.ICMPTypeEchoRequest, data), false},
		{"short data", 1, marshal(ipv4.ICMPTypeEchoReply, data[:7]), false},
		{"long data", 1, marshal(ipv4.ICMPTypeEchoReply, append(data, 0)), false},
		{"no data", 1, marshal(ipv4.ICMPTypeEchoReply, nil), false},
		{"truncated", 1, marshal(ipv4.ICMPTypeEchoReply, data)[:3], false},
		{"empty", 1, nil, false},
	} {
		got, ok := parseEchoReply(tc.proto, tc.b)
		if ok != tc.ok || (ok && got != nonce) {
			t.Errorf("%s: parseEchoReply = %#x, %v; want %#x, %v", tc.name, got, ok, uint64(nonce), tc.ok)
		}
	}
}
