package probe

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestEncoding(t *testing.T) {
	req := AppendRequest(nil, Request{Nonce: 0x0102030405060708})
	if want := []byte{'B', 'M', 1, 1, 1, 2, 3, 4, 5, 6, 7, 8}; !bytes.Equal(req, want) {
		t.Errorf("request = % x, want % x", req, want)
	}
	reply, err := AppendReply(nil, Reply{Nonce: 0x0102030405060708, State: Draining, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{'B', 'M', 1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 2, 6, 'n', 'o', 'd', 'e', '-', 'a'}
	if !bytes.Equal(reply, want) {
		t.Errorf("reply = % x, want % x", reply, want)
	}

	gotReq, err := ParseRequest(req)
	if err != nil || gotReq.Nonce != 0x0102030405060708 {
		t.Errorf("ParseRequest = %+v, %v", gotReq, err)
	}
	gotReply, err := ParseReply(append(reply, "future fields"...))
	if err != nil || gotReply != (Reply{Nonce: 0x0102030405060708, State: Draining, Node: "node-a"}) {
		t.Errorf("ParseReply = %+v, %v", gotReply, err)
	}
}

func TestAppendReplyRefuses(t *testing.T) {
	for _, r := range []Reply{
		{State: Ready},
		{State: Ready, Node: strings.Repeat("a", 254)},
		{State: 7, Node: "node-a"},
	} {
		if _, err := AppendReply(nil, r); err == nil {
			t.Errorf("AppendReply(%+v) succeeded", r)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good, _ := AppendReply(nil, Reply{Nonce: 9, State: Ready, Node: "n1"})
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:11], "11 bytes, want at least 12"},
		{"magic", append([]byte("XM"), good[2:]...), "magic 0x584d"},
		{"version", append([]byte{'B', 'M', 2}, good[3:]...), "version 2, want 1"},
		{"request as reply", AppendRequest(nil, Request{}), "type 1, want 2"},
		{"no state", good[:12], "reply of 12 bytes"},
		{"state", append(append([]byte{}, good[:12]...), 3, 2, 'n', '1'), "unknown state(3)"},
		{"empty name", append(append([]byte{}, good[:12]...), 1, 0), "node name of 0 bytes"},
		{"truncated name", good[:len(good)-1], "node name of 2 bytes in a reply of 15"},
	} {
		_, err := ParseReply(tc.b)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParseReply(% x) = %v, want an ErrFormat saying %q", tc.name, tc.b, err, tc.want)
		}
	}
	if _, err := ParseRequest(good); err == nil {
		t.Error("ParseRequest accepted a reply")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(AppendRequest(nil, Request{Nonce: 1}))
	reply, _ := AppendReply(nil, Reply{Nonce: 1, State: Ready, Node: "node-a"})
	f.Add(reply)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseReply(b); err == nil {
			again, err := AppendReply(nil, r)
			if err != nil || !bytes.HasPrefix(b, again) {
				t.Errorf("reply %+v parsed from % x encodes as % x, %v", r, b, again, err)
			}
		}
		if r, err := ParseRequest(b); err == nil && !bytes.HasPrefix(b, AppendRequest(nil, r)) {
			t.Errorf("request %+v parsed from % x does not encode back", r, b)
		}
	})
}

func TestResponder(t *testing.T) {
	server, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResponder("node-a")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- r.Serve(server) }()

	client, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ask := func(nonce uint64) Reply {
		t.Helper()
		if _, err := client.WriteTo(AppendRequest(nil, Request{Nonce: nonce}), server.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, MaxReplyLen)
		n, _, err := client.ReadFrom(b)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := ParseReply(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}

	// Garbage first: it must be dropped, and the next request still answered.
	if _, err := client.WriteTo([]byte("hello"), server.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if got := ask(42); got != (Reply{Nonce: 42, State: Ready, Node: "node-a"}) {
		t.Errorf("reply = %+v", got)
	}
	r.SetState(Draining)
	if got := ask(43); got.Nonce != 43 || got.State != Draining {
		t.Errorf("reply after SetState(Draining) = %+v", got)
	}
	if got, want := r.Stats(), (Stats{Requests: 2, Replies: 2, Malformed: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	server.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
}

func TestNewResponderRefusesBadName(t *testing.T) {
	if _, err := NewResponder(""); err == nil {
		t.Error("NewResponder(\"\") succeeded")
	}
}
