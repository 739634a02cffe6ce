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
// the binaries the tests run (etcd, kube-apiserver, kube-controller-manager and
// kube-proxy), instead of hack/tools/bin under the module root.
const BinDirEnv = "BAREMETAL_TEST_BINDIR"

// modulePath is the module whose root holds hack/tools/bin. It is matched by name
// because hack/tools has a go.mod of its own.
const modulePath = "github.com/cloud-provider-baremetal/cloud-provider-baremetal"

// ErrBinaryNotFound is returned, wrapped, by Start, StartControllerManager and Binary when
// a program is not where it should be. Outside CI the test helpers turn it into a skip.
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

// Binary returns the path of the program called name in BinDir, such as "kube-proxy", or
// an error wrapping ErrBinaryNotFound when there is no executable file of that name.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrBinaryNotFound, path)
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrBinaryNotFound, path)
	}
	return path, nil
}

// findBinaries returns the binaries of a control plane in BinDir.
func findBinaries() (binaries, error) {
	var bins binaries
	var err error
	if bins.etcd, err = Binary("etcd"); err != nil {
		return binaries{}, err
	}
	if bins.apiserver, err = Binary("kube-apiserver"); err != nil {
		return binaries{}, err
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
