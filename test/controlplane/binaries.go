package controlplane

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that, when set, gives the directory holding
// the etcd and kube-apiserver binaries, instead of hack/tools/bin under the module root.
const BinDirEnv = "BAREMETAL_TEST_BINDIR"

// modulePath is the module whose root holds hack/tools/bin. It is matched by name
// because hack/tools has a go.mod of its own.
const modulePath = "github.com/cloud-provider-baremetal/cloud-provider-baremetal"

// ErrBinaryNotFound is returned, wrapped, by Start when etcd or kube-apiserver is not
// where it should be. Outside CI the test helpers turn it into a skip.
var ErrBinaryNotFound = errors.New("control plane binary not found")

// binaries holds the paths of the two programs a control plane runs.
type binaries struct {
	etcd      string
	apiserver string
}

// BinDir returns the directory of the tools the tests run: $BAREMETAL_TEST_BINDIR, or else
// hack/tools/bin under the module root.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "hack", "tools", "bin"), nil
}

// findBinaries returns the binaries in BinDir.
func findBinaries() (binaries, error) {
	dir, err := BinDir()
	if err != nil {
		return binaries{}, err
	}
	bins := binaries{
		etcd:      filepath.Join(dir, "etcd"),
		apiserver: filepath.Join(dir, "kube-apiserver"),
	}
	for _, path := range []string{bins.etcd, bins.apiserver} {
		info, err := os.Stat(path)
		if err != nil {
			return binaries{}, fmt.Errorf("%w: %s", ErrBinaryNotFound, path)
		}
		if info.IsDir() || info.Mode()&0o111 == 0 {
			return binaries{}, fmt.Errorf("%w: %s is not an executable file", ErrBinaryNotFound, path)
		}
	}
	return bins, nil
}

// moduleRoot walks up from the working directory (a package directory under go test) to
// the directory whose go.mod declares this module.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		if parent := filepath.Dir(dir); parent == dir {
			return "", fmt.Errorf("find module root: no go.mod of %s in %s or above it; set %s", modulePath, wd, BinDirEnv)
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
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}
