package responder

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"

	"testing"
	"testing/synctest"
	"time"
)

// TestResponderHearsASlowCCM checks that a ccm probing at a long interval, as
// failover.probeInterval allows (up to 10s), is heard with every request: the challenge
// its request echoes must still be taken, however long ago the reply carrying it was sent.
func TestResponderHearsASlowCCM(t *testing.T) {
	for _, interval := range []time.Duration{100 * time.Millisecond, 600 * time.Millisecond, time.Second, 10 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := New("node-a", testKey, testVerifier, interval, nil)
				if err != nil {
					t.Fatal(err)
				}
				ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
				ccm.ask(t, ccm.next())
				for i := range 5 {
					time.Sleep(interval)
					ccm.ask(t, ccm.next())
					if got := r.LastCCM(); !got.Equal(time.Now()) {
						t.Fatalf("request %d, %v after the one before: LastCCM is %v ago, want now", i+2, interval, time.Since(got))
					}
				}
			})
		})
	}
}

// TestResponderIdleGap checks that a ccm probing an agent at the idle rate is heard with
// every request, IdleFactor intervals apart, and taken for silent only after half such a
// gap more; and that a request without the flag brings the bound back to an interval's.
func TestResponderIdleGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTestResponder(t)
		ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
		idle := func() probe.Request { req := ccm.next(); req.Idle = true; return req }
		// As after the agent restarted: only idle requests, the first echoing nothing.
		ccm.ask(t, idle())
		gap := probe.IdleFactor * testInterval
		for i := range 3 {
			time.Sleep(gap)
			if reply := ccm.ask(t, idle()); !reply.TakesIdle {
				t.Fatal("the reply does not say the agent takes idle requests")
			}
			if got := r.LastCCM(); !got.Equal(time.Now()) {
				t.Fatalf("idle request %d, %v after the one before, not heard: LastCCM is %v ago", i+2, gap, time.Since(got))
			}
			if got, want := r.SilentAfter(), gap+gap/2; got != want {
				t.Fatalf("SilentAfter after an idle request = %v, want %v", got, want)
			}
		}
		ccm.ask(t, ccm.next())
		if got, want := r.SilentAfter(), testInterval+testInterval/2; got != want {
			t.Errorf("SilentAfter after a request at the full rate = %v, want %v", got, want)
		}
		// A request recorded on the way and held back counts for no longer than the
		// challenge it echoes lives: twice the gap of the request before it.
		recorded := idle()
		ccm.ask(t, idle())
		heard := r.LastCCM()
		time.Sleep(2*gap + time.Millisecond)
		if _, ok := ccm.send(t, testKey.AppendRequest(nil, recorded)); !ok {
			t.Fatal("a fresh counter was not answered")
		}
		if got := r.LastCCM(); !got.Equal(heard) {
			t.Errorf("a request echoing a challenge %v old moved LastCCM", 2*gap)
		}
	})
}

// TestResponderIdleFlagOfNewestOnly checks that only the newest request of the ccm says
// when the next is due: an idle request that arrives after a newer one at the full rate
// (reordered on the way, or held back and let go) would otherwise make the agent wait ten
// intervals before it takes a dead ccm for silent.
func TestResponderIdleFlagOfNewestOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newTestResponder(t)
		ccm := newTalker(r, probe.FromCCM, probe.NewInstance())
		ccm.ask(t, ccm.next())
		ccm.ask(t, ccm.next())
		older := ccm.next()
		older.Idle = true
		ccm.ask(t, ccm.next())
		if _, ok := ccm.send(t, testKey.AppendRequest(nil, older)); !ok {
			t.Fatal("a fresh counter, late, was not answered")
		}
		if got, want := r.SilentAfter(), testInterval+testInterval/2; got != want {
			t.Errorf("SilentAfter after an idle request older than the newest = %v, want %v", got, want)
		}
	})
}
