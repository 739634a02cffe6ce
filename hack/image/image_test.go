package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testPlatforms are the platforms make images builds for.
var testPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// wantUser is the user each image must run as, as its manifest expects: the ccm's
// Deployment sets runAsNonRoot, which the kubelet enforces only on a numeric user; the
// agent's NET_RAW and NET_ADMIN work only for root.
var wantUser = map[string]string{
	"baremetal-ccm":   "65532:65532",
	"baremetal-agent": "0:0",
}

// fakeBinaries writes a small distinct file for each program and platform under a new
// directory laid out as make images lays out bin/, and returns that directory.
func fakeBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, plat := range testPlatforms {
		for _, p := range programs {
			path := filepath.Join(bin, plat.OS+"_"+plat.Architecture, p.name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(p.name+" for "+plat.String()), 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bin
}

// fileDigest is the sha256 of the file at path.
func fileDigest(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestArchivesAreReproducible(t *testing.T) {
	s := stamp{version: "v1.2.3", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	bin := fakeBinaries(t)
	build := func(bin string, s stamp) (v1.Hash, [sha256.Size]byte) {
		t.Helper()
		out, digest, err := buildArchive(programs[0], bin, "", testPlatforms, "registry.test/project", s)
		if err != nil {
			t.Fatal(err)
		}
		return digest, fileDigest(t, out)
	}
	digest, file := build(bin, s)

	// The same binaries, copied anew (new file times, another mode), at another second
	// of the clock: nothing of that may show.
	again := fakeBinaries(t)
	for _, plat := range testPlatforms {
		path := filepath.Join(again, plat.OS+"_"+plat.Architecture, programs[0].name)
		later := time.Now().Add(time.Hour)
		if err := errors.Join(os.Chtimes(path, later, later), os.Chmod(path, 0o755)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if d, f := build(again, s); d != digest || f != file {
		t.Errorf("a second build of the same binaries and stamp differs: index %s then %s, archive sha256 %x then %x", digest, d, file, f)
	}

	// What an image is made of does show: the stamp's time, and the binary.
	later := s
	later.created = s.created.Add(time.Second)
	if d, _ := build(fakeBinaries(t), later); d == digest {
		t.Errorf("a build with another creation time has the same digest %s: the time is not in the image", d)
	}
	changed := fakeBinaries(t)
	if err := os.WriteFile(filepath.Join(changed, "linux_arm64", programs[0].name), []byte("another binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d, _ := build(changed, s); d == digest {
		t.Errorf("a build with another arm64 binary has the same digest %s", d)
	}
}

func TestArchiveContent(t *testing.T) {
	s := stamp{version: "v1.2.3-4-gabcdef0", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1700000000, 0).UTC()}
	bin := fakeBinaries(t)
	for _, p := range programs {
		out, _, err := buildArchive(p, bin, "", testPlatforms, "registry.test/project/", s)
		if err != nil {
			t.Fatal(err)
		}
		checkArchive(t, out, p.name, s, "registry.test/project/"+p.name+":v1.2.3-4-gabcdef0", func(t *testing.T, plat v1.Platform, b []byte) {
			if want := p.name + " for " + plat.String(); string(b) != want {
				t.Errorf("%s for %s: binary %q, want %q", p.name, plat, b, want)
			}
		})
	}
}

// checkArchive checks the archive at path of program name: named ref, an index of an
// image for each of testPlatforms, each running its binary as the user its manifest wants,
// with nothing beside the binary but /etc/passwd and /etc/group, all of it stamped with s.
// checkBinary checks the binary of each platform.
func checkArchive(t *testing.T, path, name string, s stamp, ref string, checkBinary func(*testing.T, v1.Platform, []byte)) {
	t.Helper()
	a, err := readArchive(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"} {
		if got := a.annotations[key]; got != ref {
			t.Errorf("%s: index.json: %s %q, want %q", path, key, got, ref)
		}
	}
	wantAnnotations := map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.source":   "https://github.com/cloud-provider-baremetal/cloud-provider-baremetal",
		"org.opencontainers.image.revision": s.revision,
		"org.opencontainers.image.version":  s.version,
		"org.opencontainers.image.created":  s.created.Format("2006-01-02T15:04:05Z"),
	}
	checkAnnotations := func(what string, got map[string]string) {
		t.Helper()
		for k, v := range wantAnnotations {
			if got[k] != v {
				t.Errorf("%s: %s: %s %q, want %q", path, what, k, got[k], v)
			}
		}
	}

	mt, err := a.index.MediaType()
	if err != nil || mt != types.OCIImageIndex {
		t.Errorf("%s: index media type %q (%v), want %q", path, mt, err, types.OCIImageIndex)
	}
	im, err := a.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations("index", im.Annotations)
	var platforms []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Errorf("%s: manifest %s has no platform", path, m.Digest)
			continue
		}
		platforms = append(platforms, m.Platform.String())
		checkImage(t, a, m, name, s, checkAnnotations, checkBinary)
	}
	var want []string
	for _, p := range testPlatforms {
		want = append(want, p.String())
	}
	if slices.Sort(platforms); !slices.Equal(platforms, want) {
		t.Errorf("%s: index platforms %v, want %v", path, platforms, want)
	}
}

// checkImage checks the image that m describes in a: see checkArchive.
func checkImage(t *testing.T, a archive, m v1.Descriptor, name string, s stamp, checkAnnotations func(string, map[string]string), checkBinary func(*testing.T, v1.Platform, []byte)) {
	t.Helper()
	plat := *m.Platform
	what := name + " for " + plat.String()
	if m.MediaType != types.OCIManifestSchema1 {
		t.Errorf("%s: media type %q, want %q", what, m.MediaType, types.OCIManifestSchema1)
	}
	img, err := a.index.Image(m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations(what+" manifest", manifest.Annotations)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != plat.OS || cf.Architecture != plat.Architecture {
		t.Errorf("%s: config platform %s/%s", what, cf.OS, cf.Architecture)
	}
	if !cf.Created.Equal(s.created) {
		t.Errorf("%s: config created %v, want %v", what, cf.Created.Time, s.created)
	}
	entrypoint := "/usr/local/bin/" + name
	if !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("%s: entrypoint %q, cmd %q, want [%q] and none", what, cf.Config.Entrypoint, cf.Config.Cmd, entrypoint)
	}
	if cf.Config.User != wantUser[name] {
		t.Errorf("%s: user %q, want %q", what, cf.Config.User, wantUser[name])
	}
	checkAnnotations(what+" config labels", cf.Config.Labels)

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%s: %d layers, want 1", what, len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("%s: layer media type %q, want %q", what, mt, types.OCILayer)
	}
	content := layerFiles(t, what, layers[0], s.created)
	// A link could be a shell under another name.
	for name, target := range content.links {
		t.Errorf("%s: %s is a link to %s, want only files and directories", what, name, target)
	}
	files := content.files
	binary, ok := files[strings.TrimPrefix(entrypoint, "/")]
	if !ok {
		t.Fatalf("%s: no %s in the layer; files: %v", what, entrypoint, slices.Sorted(maps.Keys(files)))
	}
	if binary.mode != 0o755 {
		t.Errorf("%s: %s mode %o, want 755", what, entrypoint, binary.mode)
	}
	checkBinary(t, plat, binary.data)
	// Nothing but the binary and the user database: no shell, no package manager.
	for f := range files {
		if f != strings.TrimPrefix(entrypoint, "/") && f != "etc/passwd" && f != "etc/group" {
			t.Errorf("%s: unexpected file %s in the layer", what, f)
		}
	}
	uid, gid, _ := strings.Cut(cf.Config.User, ":")
	if !strings.Contains("\n"+string(files["etc/passwd"].data), "\n"+userLinePrefix(uid, gid)) {
		t.Errorf("%s: /etc/passwd has no user %s:%s:\n%s", what, uid, gid, files["etc/passwd"].data)
	}
}

// userLinePrefix is how the line of /etc/passwd for uid and gid goes on after the name.
func userLinePrefix(uid, gid string) string {
	if uid == "0" {
		return "root:x:0:" + gid + ":"
	}
	return "nonroot:x:" + uid + ":" + gid + ":"
}

// layerFile is a regular file of a layer.
type layerFile struct {
	mode int64
	data []byte
}

// layerContent is what a layer holds, by path.
type layerContent struct {
	files map[string]layerFile
	// links are the symbolic links, with their targets.
	links map[string]string
	// dirs are the directories (their names without the slash), with their modes.
	dirs map[string]int64
}

// layerFiles returns what l holds, and checks that every entry is owned by root (or by
// nonroot, its home), dated created, and in name order.
func layerFiles(t *testing.T, what string, l v1.Layer, created time.Time) layerContent {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	content := layerContent{files: map[string]layerFile{}, links: map[string]string{}, dirs: map[string]int64{}}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: layer: %v", what, err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: %s dated %v, want %v", what, h.Name, h.ModTime, created)
		}
		if (h.Uid != 0 || h.Gid != 0) && h.Name != "home/nonroot/" {
			t.Errorf("%s: %s owned by %d:%d, want 0:0", what, h.Name, h.Uid, h.Gid)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			content.dirs[strings.TrimSuffix(h.Name, "/")] = h.Mode
		case tar.TypeReg:
			var b bytes.Buffer
			if _, err := io.Copy(&b, tr); err != nil {
				t.Fatalf("%s: %s: %v", what, h.Name, err)
			}
			content.files[h.Name] = layerFile{mode: h.Mode, data: b.Bytes()}
		case tar.TypeSymlink:
			content.links[h.Name] = h.Linkname
		default:
			t.Errorf("%s: %s is of type %q, want only files, directories and links", what, h.Name, h.Typeflag)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("%s: layer entries not in order: %v", what, names)
	}
	return content
}
