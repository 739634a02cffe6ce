package main

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.2.0", "v1.0.0", "v10.20.30", "v0.2.0-rc.1", "v0.2.0-alpha", "v1.0.0-0.3.7", "v1.0.0-x-y.z", "v0.1.0-5-gabc1234-dirty"} {
		if err := checkVersion(v); err != nil {
			t.Errorf("checkVersion(%q): %v", v, err)
		}
	}
	for _, v := range []string{"", "0.2.0", "v0.2", "v0.2.0.1", "v01.2.0", "v0.02.0", "v0.2.0-", "v0.2.0-rc..1", "v0.2.0-01", "v0.2.0+build.1", "v0.2.0-rc_1", "V0.2.0", "v0.2.0 "} {
		err := checkVersion(v)
		if err == nil {
			t.Errorf("checkVersion(%q) accepted it", v)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("checkVersion(%q): %v; want the error to quote the value", v, err)
		}
	}
}

// TestReadImage reads archives shaped as make images writes them, and refuses those
// whose index.json a release could not trust.
func TestReadImage(t *testing.T) {
	p := program{name: "baremetal-ccm", values: "ccm"}
	blob := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	index := func(digest, name string) string {
		return fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":%q,"digest":%q,"size":%d,"annotations":{%q:%q}}]}`,
			ociImageIndex, digest, len(blob), imageNameAnnotation, name)
	}
	const name = "registry.example:5000/team/baremetal-ccm:v0.2.0"

	img, err := readImage(writeTar(t, map[string]string{"oci-layout": "{}", "index.json": index(digest, name), "blobs/sha256/" + digest[7:]: string(blob)}), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := "registry.example:5000/team/baremetal-ccm:v0.2.0@" + digest; img.ref() != want {
		t.Errorf("read %s, want %s", img.ref(), want)
	}

	other := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("other")))
	for what, files := range map[string]map[string]string{
		"no index.json":            {"blobs/sha256/" + digest[7:]: string(blob)},
		"the index blob missing":   {"index.json": index(digest, name)},
		"the index blob altered":   {"index.json": index(digest, name), "blobs/sha256/" + digest[7:]: string(blob) + " "},
		"another digest named":     {"index.json": index(other, name), "blobs/sha256/" + digest[7:]: string(blob)},
		"another program's image":  {"index.json": index(digest, "ghcr.io/x/baremetal-agent:v0.2.0"), "blobs/sha256/" + digest[7:]: string(blob)},
		"an image without its tag": {"index.json": index(digest, "ghcr.io/x/baremetal-ccm"), "blobs/sha256/" + digest[7:]: string(blob)},
		"two descriptors":          {"index.json": strings.Replace(index(digest, name), "}]}", "},"+index(digest, name)[len(`{"schemaVersion":2,"manifests":[`):], 1), "blobs/sha256/" + digest[7:]: string(blob)},
	} {
		if img, err := readImage(writeTar(t, files), p); err == nil {
			t.Errorf("%s: read %s", what, img.ref())
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
}

// writeTar writes files into a new tar and returns its path.
func writeTar(t *testing.T, files map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image.oci.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSetValue(t *testing.T) {
	doc := `# the ccm
ccm:
  image:
    # where from
    repository: ghcr.io/cloud-provider-baremetal/baremetal-ccm
    digest: ""
agent:
  image:
    digest: ''   
    tag: v1 # a comment
`
	got, err := setValue([]byte(doc), "sha256:abc", "ccm", "image", "digest")
	if err != nil {
		t.Fatal(err)
	}
	got, err = setValue(got, "registry.example/baremetal-ccm", "ccm", "image", "repository")
	if err != nil {
		t.Fatal(err)
	}
	got, err = setValue(got, "sha256:def", "agent", "image", "digest")
	if err != nil {
		t.Fatal(err)
	}
	want := `# the ccm
ccm:
  image:
    # where from
    repository: "registry.example/baremetal-ccm"
    digest: "sha256:abc"
agent:
  image:
    digest: "sha256:def"
    tag: v1 # a comment
`
	if string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, path := range [][]string{{"agent", "image", "tag"}, {"agent", "image", "pullPolicy"}, {"agent", "image"}} {
		if _, err := setValue([]byte(doc), "x", path...); err == nil {
			t.Errorf("set %s", strings.Join(path, "."))
		}
	}
}
