package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// TestDemo runs the demo as `make demo` does, and then as an unprivileged user.
func TestDemo(t *testing.T) {
	netns.RequireRoot(t)
	// A directory others may enter, so that the unprivileged run below can execute the
	// binary.
	dir, err := os.MkdirTemp("", "baremetal-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "baremetal-demo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`SERVICE +KIND +ADDRESSES +ENDPOINTS ON +ANNOUNCER +WHY`),
		regexp.MustCompile(`preferred +preferred-nodes: node3 +198\.18\.0\.\d+ +node1, node3 +node3 +node3 is the first eligible preferred node`),
		regexp.MustCompile(`local +externalTrafficPolicy Local +198\.18\.0\.\d+ +node2 +node2 `),
		// A Local Service keeps the client's address: the pod sees the client's own.
		regexp.MustCompile(`the client \(198\.18\.0\.200\) asked 198\.18\.0\.\d+; pod local-node2 on node2 answered and saw the client address 198\.18\.0\.200\n`),
		regexp.MustCompile(`198\.18\.0\.\d+ +\d+ requests answered before; after the link went down, answered again after \d+ms`),
		regexp.MustCompile(`fd00:198:18::\S+ +\d+ requests answered before; after the link went down, answered again after \d+ms`),
	} {
		if !want.MatchString(text) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	left, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if prefix := fmt.Sprintf("bmt-%d-", cmd.Process.Pid); strings.Contains(string(left), prefix) {
		t.Errorf("the demo left namespaces %s*:\n%s", prefix, left)
	}

	// Without root: a clear error, and nothing created.
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Skip("no runuser to run the demo as an unprivileged user")
	}
	out, err = exec.Command("runuser", "-u", "nobody", "--", bin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "demo: it needs root to create network namespaces") || strings.Contains(string(out), "goroutine") {
		t.Errorf("demo as nobody: %v\n%s", err, out)
	}
}
