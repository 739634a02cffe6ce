package provider

import (
	"fmt"
	"testing"

	"k8s.io/client-go/tools/record"
)

// BenchmarkRestoreOutsidePools measures the ccm's restore at start when 5,000 and 50,000
// Services hold addresses that no pool contains any more, each reported on its Service.
func BenchmarkRestoreOutsidePools(b *testing.B) {
	for _, n := range []int{5_000, 50_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			lb, _ := newTestLB(b, outsidePools(n)...)
			b.ReportAllocs()
			for b.Loop() {
				lb.recorder = record.NewFakeRecorder(n)
				lb.restored = false
				if err := lb.ready(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
