package ipam

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// BenchmarkRestore measures rebuilding the allocator from 5,000 and 50,000 Services'
// statuses: each with its own address, all sharing one address on different ports, and
// all outside every pool (a pool removed while the ccm was down). The lock every
// allocation waits on is held for the swap alone.
func BenchmarkRestore(b *testing.B) {
	pools := []config.Pool{testPool(b, "p", "10.16.0.0/12")}
	for _, n := range []int{5_000, 50_000} {
		names := serviceNames(n)
		cases := map[string][]Assignment{}
		for _, c := range []struct {
			name string
			as   func(i int) Assignment
		}{
			{"own", func(i int) Assignment {
				return Assignment{Service: names[i], Addresses: []netip.Addr{nth(netip.MustParseAddr("10.16.0.0"), i)}}
			}},
			{"shared", func(i int) Assignment {
				return Assignment{Service: names[i], Addresses: addrs("10.16.0.1"), SharingKey: "k", Ports: []Port{{"TCP", int32(i + 1)}}}
			}},
			{"outside", func(i int) Assignment {
				return Assignment{Service: names[i], Addresses: []netip.Addr{nth(netip.MustParseAddr("192.168.0.0"), i)}}
			}},
		} {
			for i := range n {
				cases[c.name] = append(cases[c.name], c.as(i))
			}
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				a := New(pools)
				b.ReportAllocs()
				for b.Loop() {
					_ = a.Restore(cases[c.name])
				}
			})
		}
	}
}

// nth returns the address i after first.
func nth(first netip.Addr, i int) netip.Addr {
	b := first.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
