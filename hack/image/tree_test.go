package main

import (
	"errors"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// treeFile is a file of a test's root file system tree.
type treeFile struct {
	mode os.FileMode
	// data is the content of a regular file; the platform is added to it, so that each
	// platform's tree is its own.
	data string
}

// treeFiles are the regular files of the trees the tests build, as a userland of
// hack/agnhost-rootfs.sh has them: programs, libraries, and a setuid program.
var treeFiles = map[string]treeFile{
	"bin/dash":                           {0o755, "dash"},
	"usr/bin/curl":                       {0o755, "curl"},
	"usr/bin/nc":                         {0o755, "nc"},
	"usr/bin/su":                         {0o755 | os.ModeSetuid, "su"},
	"lib/x86_64-linux-gnu/libc.so.6":     {0o755, "libc"},
	"lib/x86_64-linux-gnu/libz.so.1.2.3": {0o644, "libz"},
	"lib/x86_64-linux-gnu/empty":         {0o600, ""},
}

// treeLinks are the symbolic links of the trees, relative and absolute.
var treeLinks = map[string]string{
	"bin/sh":                          "dash",
	"lib/x86_64-linux-gnu/libz.so.1":  "libz.so.1.2.3",
	"lib64/ld-linux-x86-64.so.2":      "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	"usr/bin/dangling-but-kept-as-is": "../../nowhere",
}

// treeDirs are the directories of the trees with their modes: root, which the image has
// too (and keeps private), and one of mode 0700.
var treeDirs = map[string]os.FileMode{
	"bin":                  0o755,
	"lib":                  0o755,
	"lib/x86_64-linux-gnu": 0o755,
	"lib64":                0o755,
	"root":                 0o755,
	"usr":                  0o755,
	"usr/bin":              0o711,
	"usr/share":            0o700,
}

// writeTrees writes the tree of each of testPlatforms under a new directory, laid out as
// -rootfs reads it (<os>_<arch>/), each file dated mtime and, as root, owned by
// 1000:1000, neither of which may show in an image. It returns that directory.
func writeTrees(t *testing.T, mtime time.Time) string {
	t.Helper()
	trees := t.TempDir()
	for _, plat := range testPlatforms {
		root := filepath.Join(trees, plat.OS+"_"+plat.Architecture)
		var errs []error
		for name, f := range treeFiles {
			p := filepath.Join(root, name)
			errs = append(errs, os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte(f.data+" for "+plat.String()), 0o600))
		}
		for name, target := range treeLinks {
			p := filepath.Join(root, name)
			errs = append(errs, os.MkdirAll(filepath.Dir(p), 0o755), os.Symlink(target, p))
		}
		for name := range treeDirs {
			errs = append(errs, os.MkdirAll(filepath.Join(root, name), 0o755))
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if os.Geteuid() == 0 {
				if err := os.Lchown(p, 1000, 1000); err != nil {
					return err
				}
			}
			if info.Mode()&os.ModeSymlink != 0 {
				return nil
			}
			return os.Chtimes(p, mtime, mtime)
		})
		if err != nil {
			t.Fatal(err)
		}
		// The modes last: chown clears a setuid bit.
		for name, f := range treeFiles {
			errs = append(errs, os.Chmod(filepath.Join(root, name), f.mode))
		}
		for name, mode := range treeDirs {
			errs = append(errs, os.Chmod(filepath.Join(root, name), mode))
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	return trees
}

// agnhostBinaries writes a small distinct agnhost for each of testPlatforms under a new
// directory laid out as -bin reads it, and returns that directory.
func agnhostBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, plat := range testPlatforms {
		p := filepath.Join(bin, plat.OS+"_"+plat.Architecture, "agnhost")
		if err := errors.Join(os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte("agnhost for "+plat.String()), 0o755)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// agnhost is the program of the agnhost image.
func agnhost(t *testing.T) program {
	t.Helper()
	p, err := lookup("agnhost")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgnhostImageHoldsTree(t *testing.T) {
	s := stamp{version: "2.66.1", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	out, _, err := buildArchive(agnhost(t), agnhostBinaries(t), writeTrees(t, time.Now().Add(-time.Hour)), testPlatforms, "registry.k8s.io/e2e-test-images", s)
	if err != nil {
		t.Fatal(err)
	}
	a, err := readArchive(out, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ref := "registry.k8s.io/e2e-test-images/agnhost:2.66.1"; a.annotations["io.containerd.image.name"] != ref {
		t.Errorf("%s: named %q, want %q", out, a.annotations["io.containerd.image.name"], ref)
	}
	im, err := a.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(testPlatforms) {
		t.Fatalf("%s: %d images, want %d", out, len(im.Manifests), len(testPlatforms))
	}
	for _, m := range im.Manifests {
		img, err := a.index.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkAgnhostImage(t, img, *m.Platform, s)
	}
}

// checkAgnhostImage checks that img, the agnhost image of plat, runs /agnhost pause as root
// as upstream's does, and holds the tree of plat that writeTrees wrote with its modes,
// links and nothing else of the machine.
func checkAgnhostImage(t *testing.T, img v1.Image, plat v1.Platform, s stamp) {
	t.Helper()
	what := "agnhost for " + plat.String()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cf.Config; !slices.Equal(c.Entrypoint, []string{"/agnhost"}) || !slices.Equal(c.Cmd, []string{"pause"}) || c.User != "0:0" {
		t.Errorf("%s: entrypoint %q, cmd %q, user %q; want [/agnhost], [pause], 0:0", what, c.Entrypoint, c.Cmd, c.User)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%s: %d layers, want 1", what, len(layers))
	}
	content := layerFiles(t, what, layers[0], s.created)

	want := map[string]layerFile{
		"agnhost":    {0o755, []byte("agnhost for " + plat.String())},
		"etc/passwd": {0o644, []byte(passwd)},
		"etc/group":  {0o644, []byte(group)},
	}
	for name, f := range treeFiles {
		want[name] = layerFile{modeBits(f.mode), []byte(f.data + " for " + plat.String())}
	}
	if got, w := slices.Sorted(maps.Keys(content.files)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
		t.Errorf("%s: files %q, want %q", what, got, w)
	}
	for name, w := range want {
		if got, ok := content.files[name]; ok && (got.mode != w.mode || string(got.data) != string(w.data)) {
			t.Errorf("%s: %s of mode %o holds %q, want %o and %q", what, name, got.mode, got.data, w.mode, w.data)
		}
	}
	if got := content.files["usr/bin/su"].mode; got != 0o4755 {
		t.Errorf("%s: usr/bin/su of mode %o, want its setuid bit kept: 4755", what, got)
	}
	if !maps.Equal(content.links, treeLinks) {
		t.Errorf("%s: links %v, want %v as written", what, content.links, treeLinks)
	}

	for name, mode := range treeDirs {
		got, ok := content.dirs[name]
		switch {
		case !ok:
			t.Errorf("%s: no directory %s", what, name)
		case name == "root" && got != 0o700:
			t.Errorf("%s: /root of mode %o, want the image's 700, not the tree's", what, got)
		case name != "root" && got != int64(mode):
			t.Errorf("%s: directory %s of mode %o, want %o", what, name, got, mode)
		}
	}
	// /agnhost is where upstream has it: no /usr/local/bin.
	if _, ok := content.dirs["usr/local"]; ok {
		t.Errorf("%s: has /usr/local, want agnhost at /agnhost only", what)
	}
	// Every entry's directory is in the layer before it (layerFiles checked the order).
	for _, name := range slices.Concat(slices.Collect(maps.Keys(content.files)), slices.Collect(maps.Keys(content.links)), slices.Collect(maps.Keys(content.dirs))) {
		if d := path.Dir(name); d != "." {
			if _, ok := content.dirs[d]; !ok {
				t.Errorf("%s: %s is in the layer, its directory %s is not", what, name, d)
			}
		}
	}
}

func TestTreeIsReproducible(t *testing.T) {
	s := stamp{version: "2.66.1", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	p, bin := agnhost(t), agnhostBinaries(t)
	build := func(trees string) v1.Hash {
		t.Helper()
		_, digest, err := buildArchive(p, bin, trees, testPlatforms, "registry.k8s.io/e2e-test-images", s)
		if err != nil {
			t.Fatal(err)
		}
		return digest
	}
	digest := build(writeTrees(t, time.Now().Add(-time.Hour)))
	// The same files written anew, at other times, in another order of the map.
	if again := build(writeTrees(t, time.Unix(1234567890, 0))); again != digest {
		t.Errorf("the same trees written twice give the images %s, then %s", digest, again)
	}

	// What the tree holds does show: a mode, a link's target, a file's bytes.
	for what, change := range map[string]func(root string) error{
		"a mode":          func(root string) error { return os.Chmod(filepath.Join(root, "usr/bin/nc"), 0o700) },
		"a link's target": func(root string) error { return relink(filepath.Join(root, "bin/sh"), "/bin/dash") },
		"a file's bytes": func(root string) error {
			return os.WriteFile(filepath.Join(root, "usr/bin/curl"), []byte("another curl"), 0o755)
		},
	} {
		trees := writeTrees(t, time.Now())
		if err := change(filepath.Join(trees, "linux_arm64")); err != nil {
			t.Fatal(err)
		}
		if d := build(trees); d == digest {
			t.Errorf("another tree, with %s changed, gives the same images %s", what, d)
		}
	}
}

// relink makes the symbolic link at p point to target.
func relink(p, target string) error {
	if err := os.Remove(p); err != nil {
		return err
	}
	return os.Symlink(target, p)
}

func TestTreeRefused(t *testing.T) {
	s := stamp{version: "2.66.1", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	for _, tc := range []struct {
		name string
		// change makes the tree of linux/arm64 one that cannot be taken.
		change func(root string) error
		// want is in the error.
		want string
	}{
		{
			name:   "the image's own file",
			change: func(root string) error { return os.WriteFile(filepath.Join(root, "agnhost"), nil, 0o755) },
			want:   "/agnhost: the tree has one, and the image has its own",
		},
		{
			name: "the image's user database",
			change: func(root string) error {
				return errors.Join(os.Mkdir(filepath.Join(root, "etc"), 0o755), os.WriteFile(filepath.Join(root, "etc/passwd"), nil, 0o644))
			},
			want: "/etc/passwd: the tree has one",
		},
		{
			name:   "a link where the image has a directory",
			change: func(root string) error { return os.Symlink("/tmp", filepath.Join(root, "etc")) },
			want:   "/etc: the tree has one",
		},
		{
			name:   "a named pipe",
			change: func(root string) error { return syscall.Mkfifo(filepath.Join(root, "usr/bin/pipe"), 0o644) },
			want:   "usr/bin/pipe is a named pipe: want only directories, regular files and symbolic links",
		},
		{
			name:   "no tree for a platform",
			change: os.RemoveAll,
			want:   "linux_arm64: no such file or directory",
		},
		{
			name: "a link instead of the tree",
			change: func(root string) error {
				return errors.Join(os.Rename(root, root+".real"), os.Symlink(root+".real", root))
			},
			want: "linux_arm64 is a symbolic link, not a directory",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trees := writeTrees(t, time.Now())
			if err := tc.change(filepath.Join(trees, "linux_arm64")); err != nil {
				t.Fatal(err)
			}
			_, _, err := buildArchive(agnhost(t), agnhostBinaries(t), trees, testPlatforms, "registry.k8s.io/e2e-test-images", s)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "agnhost for linux/arm64") {
				t.Errorf("build with %s: error %v, want one of agnhost for linux/arm64 saying %q", tc.name, err, tc.want)
			}
		})
	}
}
