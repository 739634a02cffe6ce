package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/module"
)

// BinDirEnv names the environment variable that, when set, gives the directory holding
// the binaries the tests run, instead of hack/tools/bin under the module root.
const BinDirEnv = module.BinDirEnv

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
func BinDir() (string, error) { return module.BinDir() }

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
