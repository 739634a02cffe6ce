package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestMadeImages checks the archives that make images wrote into $BAREMETAL_IMAGES (make
// test-images sets it, with the VERSION and REGISTRY they were built with), then builds
// them once more with make images, at another time, and wants the same bytes.
func TestMadeImages(t *testing.T) {
	bin := os.Getenv("BAREMETAL_IMAGES")
	if bin == "" {
		t.Skip("BAREMETAL_IMAGES is unset: make test-images builds the images and runs this")
	}
	version, registry := os.Getenv("BAREMETAL_IMAGE_VERSION"), os.Getenv("BAREMETAL_IMAGE_REGISTRY")
	if version == "" || registry == "" {
		t.Fatal("BAREMETAL_IMAGE_VERSION and BAREMETAL_IMAGE_REGISTRY must be set with BAREMETAL_IMAGES")
	}
	root := git(t, "rev-parse", "--show-toplevel")
	// What the images must say, found here rather than taken from the build: the commit
	// checked out, and its time unless SOURCE_DATE_EPOCH overrides it.
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		epoch = git(t, "log", "-1", "--format=%ct")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		t.Fatalf("commit time %q: %v", epoch, err)
	}
	s := stamp{version: version, revision: git(t, "rev-parse", "HEAD"), created: time.Unix(sec, 0).UTC()}

	for _, name := range []string{"baremetal-ccm", "baremetal-agent"} {
		checkArchive(t, filepath.Join(bin, name+".oci.tar"), name, s, registry+"/"+name+":"+version, func(t *testing.T, plat v1.Platform, b []byte) {
			checkGoBinary(t, name, plat, b, s)
		})
	}

	// Another build of the same commit, a second or more later, into another directory:
	// the binaries are linked anew and every file is new. Nothing may differ.
	again := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "images", "BIN="+again, "VERSION="+version, "REGISTRY="+registry)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make images BIN=%s: %v\n%s", again, err, out)
	}
	for _, name := range []string{"baremetal-ccm", "baremetal-agent"} {
		first, second := fileDigest(t, filepath.Join(bin, name+".oci.tar")), fileDigest(t, filepath.Join(again, name+".oci.tar"))
		if first != second {
			t.Errorf("%s.oci.tar: sha256 %x, then %x from a second make images: the build is not reproducible", name, first, second)
		}
		// The index digests too, which is what a registry serves.
		d1, d2 := indexDigest(t, filepath.Join(bin, name+".oci.tar")), indexDigest(t, filepath.Join(again, name+".oci.tar"))
		if d1 != d2 {
			t.Errorf("%s: index %s, then %s from a second make images", name, d1, d2)
		} else {
			t.Logf("%s: index %s from both builds", name, d1)
		}
	}
}

// checkGoBinary checks that b is the static Go binary of program name for plat, built
// from the commit the way make build builds: CGO_ENABLED=0, -trimpath, the version, the
// commit and the commit's time (not the clock's) stamped in. On a machine of plat's kind it also runs it.
func checkGoBinary(t *testing.T, name string, plat v1.Platform, b []byte, s stamp) {
	t.Helper()
	what := name + " for " + plat.String()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not an ELF file: %v", what, err)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[plat.Architecture]
	if f.Machine != wantMachine {
		t.Errorf("%s: ELF machine %v, want %v", what, f.Machine, wantMachine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a program interpreter: dynamically linked, and the image has no libc", what)
		}
	}

	info, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: no Go build information: %v", what, err)
	}
	if want := "github.com/cloud-provider-baremetal/cloud-provider-baremetal/" + strings.TrimPrefix(name, "baremetal-"); info.Path != want {
		t.Errorf("%s: built from %s, want %s", what, info.Path, want)
	}
	settings := map[string]string{}
	for _, kv := range info.Settings {
		settings[kv.Key] = kv.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": plat.OS, "GOARCH": plat.Architecture} {
		if settings[k] != v {
			t.Errorf("%s: built with %s=%q, want %q", what, k, settings[k], v)
		}
	}
	// -trimpath keeps -ldflags out of the build information; the strings they set are in
	// the binary's data.
	for _, want := range []string{s.version, s.revision, s.created.Format("2006-01-02T15:04:05Z")} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %q is not stamped in (-ldflags -X k8s.io/component-base/version...)", what, want)
		}
	}

	if plat.OS != runtime.GOOS || plat.Architecture != runtime.GOARCH {
		return
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), s.version) {
		t.Errorf("%s --version: %v, printed %q; want it to name %s", what, err, out, s.version)
	}
}

// indexDigest is the digest of the image index in the archive at path.
func indexDigest(t *testing.T, path string) v1.Hash {
	t.Helper()
	a, err := readArchive(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// git runs git with args and returns what it printed, trimmed.
func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
