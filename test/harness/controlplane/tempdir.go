package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// tempDirPattern names the directories of control planes, so that later runs can find
// the ones left behind.
const tempDirPattern = "baremetal-controlplane-*"

// lockedTempDir is a control plane's directory, locked for as long as its test binary
// lives. A test binary that panics or is killed cannot remove its directory, and etcd's
// preallocated write-ahead log makes each one some 60 MiB; the lock, which the kernel
// drops when the process dies, tells later runs which directories they may remove.
type lockedTempDir struct {
	path string
	lock *os.File // the open directory, flock(2)ed
}

func makeLockedTempDir() (*lockedTempDir, error) {
	removeAbandonedTempDirs()
	path, err := os.MkdirTemp("", tempDirPattern)
	if err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	lock, err := os.Open(path)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(path)
		return nil, fmt.Errorf("lock control plane directory: %w", err)
	}
	return &lockedTempDir{path: path, lock: lock}, nil
}

func (d *lockedTempDir) remove() error {
	err := os.RemoveAll(d.path)
	d.lock.Close()
	if err != nil {
		return fmt.Errorf("remove control plane directory: %w", err)
	}
	return nil
}

// removeAbandonedTempDirs removes the directories of control planes whose test binaries
// have died. A directory younger than a minute is left alone: its owner may not have
// locked it yet.
func removeAbandonedTempDirs() {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPattern))
	for _, path := range paths {
		info, err := os.Stat(path)
		if err != nil || !info.IsDir() || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(path)
		}
		f.Close()
	}
}
