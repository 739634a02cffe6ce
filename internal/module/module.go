// Package module finds this module's root from a working directory under it (a package's,
// under go test; the root's, under make), and the directory of the tools that hack/tools
// builds there: the test control plane's binaries and helm.
package module

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that, when set, gives the directory holding
// the tools (etcd, kube-apiserver, kube-controller-manager, kube-proxy, helm), instead of
// hack/tools/bin under the module root.
const BinDirEnv = "BAREMETAL_TEST_BINDIR"

// path is the module whose root holds hack/tools/bin. It is matched by name because
// hack/tools has a go.mod of its own.
const path = "github.com/cloud-provider-baremetal/cloud-provider-baremetal"

// BinDir returns the directory of the tools: $BAREMETAL_TEST_BINDIR, or else
// hack/tools/bin under the module root.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "hack", "tools", "bin"), nil
}

// Root walks up from the working directory to the directory whose go.mod declares this
// module.
func Root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		if parent := filepath.Dir(dir); parent == dir {
			return "", fmt.Errorf("find module root: no go.mod of %s in %s or above it; set %s", path, wd, BinDirEnv)
		}
	}
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(scanner.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == path
		}
	}
	return false
}
