// Package ci tells a test whether it runs in CI, where a test that cannot run fails
// instead of skipping: CI must not pass by running nothing.
package ci

import (
	"os"
	"strconv"
	"testing"
)

// Running reports whether the environment variable CI is true, as CI systems set it and
// make test under .ci/run does.
func Running() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Missing ends the test for want of something it needs, saying what: it skips the test,
// or fails it under CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Running() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
