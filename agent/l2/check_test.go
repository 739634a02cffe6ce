package l2

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// TestCheckOnTheWire asks for addresses from one node while responders on two others
// answer for them, as they would on a segment with a conflict, and sees who answered.
func TestCheckOnTheWire(t *testing.T) {
	n := netns.ForTest(t, 3)
	checker, owner, stranger := n.Nodes[0], n.Nodes[1], n.Nodes[2]
	pools := []iprange.Range{
		iprange.FromPrefix(netip.MustParsePrefix("198.18.0.0/24")),
		iprange.FromPrefix(netip.MustParsePrefix("fd00:198:18::/64")),
	}
	vip4, vip6 := netip.MustParseAddr("198.18.0.210"), netip.MustParseAddr("fd00:198:18::210")
	shared4, shared6 := netip.MustParseAddr("198.18.0.211"), netip.MustParseAddr("fd00:198:18::211")
	dark4, dark6 := netip.MustParseAddr("198.18.0.212"), netip.MustParseAddr("fd00:198:18::212")
	respond := func(h *netns.Host, addrs ...netip.Addr) {
		for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
			r := listen(t, h, func(ifi *net.Interface) (*Responder, error) {
				if f == iprange.IPv6 {
					return ListenNDP(context.Background(), ifi, Config{})
				}
				return ListenARP(ifi, Config{})
			})
			t.Cleanup(func() { r.Close() })
			go func() { _ = r.Serve() }()
			if _, err := r.Set(addrs); err != nil {
				t.Fatal(err)
			}
		}
	}
	respond(owner, vip4, vip6, shared4, shared6)
	respond(stranger, shared4, shared6)

	for _, f := range []iprange.Family{iprange.IPv4, iprange.IPv6} {
		c := listen(t, checker, func(ifi *net.Interface) (*Checker, error) { return ListenCheck(ifi, f, pools) })
		served := make(chan error, 1)
		go func() { served <- c.Serve() }()
		defer func() {
			c.Close()
			if err := <-served; err != nil {
				t.Errorf("Serve after Close: %v, want nil", err)
			}
		}()
		want := map[netip.Addr][]net.HardwareAddr{
			vip4: {owner.MAC}, shared4: {owner.MAC, stranger.MAC}, dark4: nil,
			vip6: {owner.MAC}, shared6: {owner.MAC, stranger.MAC}, dark6: nil,
		}
		// One round for all, as the wire check asks: to every host, then to the owner
		// alone, whom only the owner hears.
		for _, to := range []net.HardwareAddr{nil, owner.MAC} {
			var ask []Question
			for a := range want {
				if iprange.FamilyOf(a) == f {
					ask = append(ask, Question{Addr: a, To: to})
				}
			}
			answers, err := c.Ask(context.Background(), ask, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range ask {
				got, w := answers[q.Addr], want[q.Addr]
				if to != nil && len(w) > 0 {
					w = w[:1] // the owner's
				}
				slices.SortFunc(got, func(a, b net.HardwareAddr) int { return slices.Compare(a, b) })
				if !slices.EqualFunc(got, w, func(a, b net.HardwareAddr) bool { return a.String() == b.String() }) {
					t.Errorf("answers for %s asked of %v = %v, want %v", q.Addr, to, got, w)
				}
			}
		}
	}
}
