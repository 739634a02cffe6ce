package netns

import (
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips the test unless it runs as root with ip(8) installed, which network
// namespaces need. Under CI (the environment variable CI is true) it fails the test
// instead: CI must not pass by running nothing.
func RequireRoot(t testing.TB) {
	t.Helper()
	var why string
	if os.Geteuid() != 0 {
		why = "needs root to create network namespaces; run the test as root (go test -exec sudo …)"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs ip(8) from iproute2: " + err.Error()
	}
	if why == "" {
		return
	}
	ci.Missing(t, "%s", why)
}

// ForTest creates a Network with the given number of nodes for the test, skipping the
// test as RequireRoot does where that is impossible, and closes it when the test and its
// subtests are done.
func ForTest(t testing.TB, nodes int) *Network {
	t.Helper()
	RequireRoot(t)
	n, err := Create(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close the test network: %v", err)
		}
	})
	return n
}
