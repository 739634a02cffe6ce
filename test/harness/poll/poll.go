// Package poll waits, in tests, for a state to come about: the one way every suite polls.
package poll

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often Until and NoError check.
const Interval = 50 * time.Millisecond

// A Watched is a process whose exit ends a wait at once: *process.Process.
type Watched interface {
	Name() string
	Exited() <-chan struct{}
	ExitError() error
}

// Until calls check every Interval until it reports done, and fails the test with check's
// last reason once timeout has passed, or at once when one of watched exits. check's
// context ends with the test or the timeout.
func Until(t testing.TB, timeout time.Duration, check func(ctx context.Context) (done bool, why string), watched ...Watched) {
	t.Helper()
	if why, ok := wait(t.Context(), timeout, check, watched); !ok {
		t.Fatalf("not within %s: %s", timeout, why)
	}
}

// NoError is Until for a check that says what is still wrong as an error, and nil once
// nothing is.
func NoError(t testing.TB, timeout time.Duration, check func(ctx context.Context) error, watched ...Watched) {
	t.Helper()
	Until(t, timeout, func(ctx context.Context) (bool, string) {
		if err := check(ctx); err != nil {
			return false, err.Error()
		}
		return true, ""
	}, watched...)
}

// wait polls check as Until does, and reports its last reason and whether it got done.
func wait(ctx context.Context, timeout time.Duration, check func(ctx context.Context) (bool, string), watched []Watched) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	why := "never checked"
	for {
		for _, w := range watched {
			select {
			case <-w.Exited():
				return fmt.Sprintf("%s; %s exited: %v", why, w.Name(), w.ExitError()), false
			default:
			}
		}
		var done bool
		if done, why = check(ctx); done {
			return "", true
		}
		select {
		case <-ctx.Done():
			return why, false
		case <-tick.C:
		}
	}
}
