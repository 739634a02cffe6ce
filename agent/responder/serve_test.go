package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"crypto/ed25519"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"
)

// testInterval is the probe interval of the tests' responders: the default.
const testInterval = 100 * time.Millisecond

// testKey is a key as an install would make it: the base64 of 32 random bytes.
var testKey = mustKey("pqN1yG3lO2xZ0cB7v8W4eR6tY9uI5oP1aS3dF7gH2jK=\n")

// testSigner is the ccm's signing key in these tests, and testVerifier its public key.
var (
	testSigner   = probe.NewSigner(ed25519.NewKeyFromSeed([]byte("the ccm's key for the probe tests")[:ed25519.SeedSize]))
	testVerifier = testSigner.Verifier()
)

func mustKey(s string) *probe.Key {
	k, err := probe.ParseKey([]byte(s))
	if err != nil {
		panic(err)
	}
	return k
}

// TestResponderServe checks the responder on a socket: garbage and requests without the
// key are dropped unanswered and counted, and the replies carry the state set.
func TestResponderServe(t *testing.T) {
	server, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New("node-a", testKey, testVerifier, testInterval, nil)
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
	send := func(b []byte) {
		t.Helper()
		if _, err := client.WriteTo(b, server.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(nonce uint64) probe.Reply {
		t.Helper()
		send(testKey.AppendRequest(nil, probe.Request{Nonce: nonce, Sender: probe.FromAgent, Instance: 1, Counter: nonce, To: probe.NodeTag("node-a")}))
		if err := client.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, probe.MaxDatagram)
		n, _, err := client.ReadFrom(b)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := testKey.ParseReply(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}

	// Garbage and a request without the key first: the garbage is dropped unanswered, the
	// request refused (the next read gets the refusal), and both are counted.
	send([]byte("hello"))
	send(mustKey("not the key, but long enough for one\n").AppendRequest(nil, probe.Request{Nonce: 41, Sender: probe.FromAgent, Instance: 1, Counter: 41, To: probe.NodeTag("node-a")}))
	if err := client.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, probe.MaxDatagram)
	n, _, err := client.ReadFrom(b)
	if err != nil {
		t.Fatal(err)
	}
	if nonce, err := probe.ParseRefusal(b[:n]); err != nil || nonce != 41 {
		t.Fatalf("answer to a request with another key: % x (%d, %v), want a refusal of nonce 41", b[:n], nonce, err)
	}
	got := ask(42)
	if got.Challenge == 0 {
		t.Error("reply carries no challenge")
	}
	got.Challenge = 0
	if !reflect.DeepEqual(got, probe.Reply{Nonce: 42, State: probe.Ready, Node: "node-a", TakesIdle: true}) {
		t.Errorf("reply = %+v", got)
	}
	r.SetState(probe.Draining)
	if got := ask(43); got.Nonce != 43 || got.State != probe.Draining {
		t.Errorf("reply after SetState(Draining) = %+v", got)
	}
	want := Stats{Requests: 2, Replies: 2, Malformed: 1, Unauthenticated: 1}
	waitStats(t, r, fmt.Sprintf("%+v", want), func(st Stats) bool { return st == want })
	server.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
}

func TestNewResponderRefusesBadName(t *testing.T) {
	if _, err := New("", testKey, testVerifier, testInterval, nil); err == nil {
		t.Error("New(\"\") succeeded")
	}
}
