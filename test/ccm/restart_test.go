package ccm

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRestartKeepsAddresses kills the ccm with SIGKILL while it holds 300 Services'
// addresses, adds 50 Services while it is down, and starts it again: it must rebuild what
// it had from the Services' status, so no address moves and none is given out twice.
func TestRestartKeepsAddresses(t *testing.T) {
	e := setup(t)
	ns := e.namespace(t)
	ccm := e.startCCM(t)

	const before, during = 300, 50
	for i := range before {
		e.create(t, ns, lbService(fmt.Sprintf("before-%03d", i)))
	}
	first := e.waitAll(t, ns, before)
	if err := ccm.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range during {
		e.create(t, ns, lbService(fmt.Sprintf("during-%02d", i)))
	}
	e.startCCM(t)
	second := e.waitAll(t, ns, before+during)

	for name, addr := range first {
		if second[name] != addr {
			t.Errorf("%s had %s before the restart and %s after", name, addr, second[name])
		}
	}
	holder := map[string]string{}
	for name, addr := range second {
		if other, dup := holder[addr]; dup {
			t.Errorf("%s is held by both %s and %s", addr, other, name)
		}
		holder[addr] = name
	}
}

// waitAll waits until n Services in ns have an address, and returns them by name.
func (e *env) waitAll(t *testing.T, ns string, n int) map[string]string {
	t.Helper()
	got := map[string]string{}
	poll.Until(t, 2*time.Minute, func(ctx context.Context) (bool, string) {
		list, err := e.admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(got)
		for _, svc := range list.Items {
			if addrs := ingress(t, &svc); len(addrs) > 0 {
				got[svc.Name] = addrs[0]
			}
		}
		return len(got) == n, fmt.Sprintf("%d of %d Services have an address", len(got), n)
	})
	return maps.Clone(got)
}
