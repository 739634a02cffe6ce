package conntrack

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// entry returns a TCP entry of a connection to dst:8080 whose reply comes from
// replySrc:replyPort, in TCP state state, with no reply seen.
func entry(dst, replySrc string, replyPort uint16, state uint8) Entry {
	return Entry{
		Proto:    unix.IPPROTO_TCP,
		Dst:      netip.AddrPortFrom(netip.MustParseAddr(dst), 8080),
		ReplySrc: netip.AddrPortFrom(netip.MustParseAddr(replySrc), replyPort),
		TCPState: state,
	}
}

func TestStale(t *testing.T) {
	udp := entry("198.18.0.100", "198.18.0.100", 8080, 0)
	udp.Proto = unix.IPPROTO_UDP
	replied := entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_SENT)
	replied.Status = statusSeenReply
	mapped := entry("::ffff:198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_SENT)
	for _, tc := range []struct {
		name  string
		entry Entry
		want  string // the stale address; "" for none
	}{
		{"untranslated, unanswered", entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_SENT), "198.18.0.100"},
		{"IPv6, untranslated, unanswered", entry("fd00:198:18::100", "fd00:198:18::100", 8080, nl.TCP_CONNTRACK_SYN_SENT), "fd00:198:18::100"},
		{"IPv4-mapped", mapped, "198.18.0.100"},
		{"translated to a pod", entry("198.18.0.100", "198.19.3.2", 8080, nl.TCP_CONNTRACK_SYN_SENT), ""},
		{"translated to another port", entry("198.18.0.100", "198.18.0.100", 9090, nl.TCP_CONNTRACK_SYN_SENT), ""},
		{"answered by a local listener", entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_SYN_RECV), ""},
		{"a reply seen", replied, ""},
		{"established", entry("198.18.0.100", "198.18.0.100", 8080, nl.TCP_CONNTRACK_ESTABLISHED), ""},
		{"UDP", udp, ""},
		{"nothing read", Entry{Proto: unix.IPPROTO_TCP, TCPState: nl.TCP_CONNTRACK_SYN_SENT}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ok := Stale(tc.entry)
			got := ""
			if ok {
				got = addr.String()
			}
			if got != tc.want {
				t.Errorf("Stale(%+v) = %q, want %q", tc.entry, got, tc.want)
			}
		})
	}
}

// FuzzParseEntry: no message of a dump, however cut or garbled, panics the parser.
func FuzzParseEntry(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 8, 0, 3, 0, 0, 0, 0, 8})
	f.Add([]byte{2, 0, 0, 0, 52, 0, 1, 128, 20, 0, 1, 128, 8, 0, 1, 0, 198, 18, 0, 200})
	f.Add([]byte{2, 0, 0, 0, 4, 0, 1, 128, 3, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		e, err := parseEntry(msg)
		if err == nil {
			Stale(e)
		}
	})
}
