package annotation

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// BenchmarkParse measures Parse of a Service whose list annotation holds as many names as
// its limit allows, and 5,000 and 50,000, which are refused: any Service owner can write
// one, and the ccm and every agent parse it on every sync.
func BenchmarkParse(b *testing.B) {
	for _, key := range []string{PreferredNodes, SharedIPNamespaces, Standbys} {
		for _, n := range []int{MaxListItems, 5_000, 50_000} {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("node-%d", i)
			}
			svc := service("web", v1.IPFamilyPolicySingleStack, v1.IPv4Protocol)
			svc.Annotations[AllowSharedIP] = "web"
			svc.Annotations[Announcer] = "node-0"
			svc.Annotations[key] = strings.Join(names, ",")
			b.Run(fmt.Sprintf("%s/%d", strings.TrimPrefix(key, Prefix), n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _ = Parse(svc)
				}
			})
		}
	}
}
