package ipam

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

const benchAllocated = 100_000

var benchPools = []struct {
	name   string
	cidr   string
	family iprange.Family
}{
	{"ipv6-64", "2001:db8::/64", iprange.IPv6},
	{"ipv4-12", "10.16.0.0/12", iprange.IPv4},
}

func serviceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("namespace-%d/service-%d", i%100, i)
	}
	return names
}

// BenchmarkAssign measures one allocation while the pool fills up to 100,000 addresses,
// and reports the heap retained per allocated address at 100,000.
func BenchmarkAssign(b *testing.B) {
	for _, bp := range benchPools {
		b.Run(bp.name, func(b *testing.B) {
			pools := []config.Pool{testPool(b, "p", bp.cidr)}
			retained := retainedPerAddress(b, pools, bp.family)
			names := serviceNames(benchAllocated)
			a := New(pools)
			req := Request{Namespace: "default", Families: []iprange.Family{bp.family}}
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				if n == benchAllocated {
					b.StopTimer()
					a = New(pools)
					n = 0
					b.StartTimer()
				}
				req.Service = names[n]
				if _, err := a.Assign(req); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(retained, "retained-B/addr")
		})
	}
}

// BenchmarkChurn measures releasing a random Service and allocating for it again, with
// 100,000 addresses allocated: the released address becomes a hole that is found again.
func BenchmarkChurn(b *testing.B) {
	for _, bp := range benchPools {
		b.Run(bp.name, func(b *testing.B) {
			a := New([]config.Pool{testPool(b, "p", bp.cidr)})
			names := serviceNames(benchAllocated)
			req := Request{Namespace: "default", Families: []iprange.Family{bp.family}}
			for _, name := range names {
				req.Service = name
				if _, err := a.Assign(req); err != nil {
					b.Fatal(err)
				}
			}
			rnd := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				req.Service = names[rnd.IntN(len(names))]
				a.Release(req.Service)
				if _, err := a.Assign(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// retainedPerAddress allocates 100,000 addresses to Services with names built after the
// first measurement, so their bytes count too, and returns the heap growth per address.
func retainedPerAddress(b *testing.B, pools []config.Pool, family iprange.Family) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := New(pools)
	names := serviceNames(benchAllocated)
	req := Request{Namespace: "default", Families: []iprange.Family{family}}
	for _, name := range names {
		req.Service = name
		if _, err := a.Assign(req); err != nil {
			b.Fatal(err)
		}
	}
	// names is dead from here: only the copies the allocator keeps count.
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(a)
	return float64(after.HeapAlloc-before.HeapAlloc) / benchAllocated
}
