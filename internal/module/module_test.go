package module

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRoot(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if rel, err := filepath.Rel(root, wd); err != nil || rel != filepath.Join("internal", "module") {
		t.Errorf("module root %s is not two levels above the package directory %s", root, wd)
	}
}

func TestBinDir(t *testing.T) {
	t.Setenv(BinDirEnv, "/elsewhere")
	if dir, err := BinDir(); err != nil || dir != "/elsewhere" {
		t.Errorf("BinDir with %s set = %q, %v; want /elsewhere", BinDirEnv, dir, err)
	}
}
