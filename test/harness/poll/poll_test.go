package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type exited struct{ c chan struct{} }

func (e exited) Name() string            { return "agent" }
func (e exited) Exited() <-chan struct{} { return e.c }
func (e exited) ExitError() error        { return errors.New("exit status 1") }

func TestWait(t *testing.T) {
	n := 0
	if why, ok := wait(t.Context(), time.Second, func(context.Context) (bool, string) {
		n++
		return n == 3, "not yet"
	}, nil); !ok || n != 3 {
		t.Errorf("wait for the third check: %q %v after %d checks, want done after 3", why, ok, n)
	}
	start := time.Now()
	if why, ok := wait(t.Context(), 200*time.Millisecond, func(context.Context) (bool, string) { return false, "still 2 pods" }, nil); ok || why != "still 2 pods" || time.Since(start) < 200*time.Millisecond {
		t.Errorf("wait that never gets done: %q %v after %v, want the last reason after the timeout", why, ok, time.Since(start))
	}
	gone := exited{make(chan struct{})}
	close(gone.c)
	if why, ok := wait(t.Context(), time.Minute, func(context.Context) (bool, string) { return false, "no address" }, []Watched{gone}); ok || !strings.Contains(why, "agent exited: exit status 1") {
		t.Errorf("wait on an exited process: %q %v, want it to end at once, saying so", why, ok)
	}
}
