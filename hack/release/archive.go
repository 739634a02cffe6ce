package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// image is the image of one program in a release: the image index of an archive of make
// images, by the name the archive gives it and by its digest.
type image struct {
	program program
	// repository is the image's name without its tag: ghcr.io/cloud-provider-baremetal/baremetal-ccm.
	repository string
	// tag is the version it was built as: v0.2.0.
	tag string
	// digest is the digest of its image index, sha256:<hex>: what a registry serves for
	// the tag once pushed, on every platform.
	digest string
}

// name is the image's name with its tag.
func (i image) name() string { return i.repository + ":" + i.tag }

// ref is the image's name pinned to its digest, as install.yaml runs it.
func (i image) ref() string { return i.name() + "@" + i.digest }

// Media type and annotation of the descriptor in the index.json of an archive of make
// images (hack/image writes them).
const (
	ociImageIndex = "application/vnd.oci.image.index.v1+json"
	// imageNameAnnotation is containerd's annotation of the image's full name.
	imageNameAnnotation = "io.containerd.image.name"
)

// readImage reads the image of p from the archive at path: an OCI image layout in a tar
// whose index.json has one descriptor, of an image index named <repository>/<p.name>:<tag>.
// It checks that the archive holds the index's blob, with that digest.
func readImage(path string, p program) (image, error) {
	f, err := os.Open(path)
	if err != nil {
		return image{}, err
	}
	defer f.Close()
	var index []byte
	blobs := map[string]bool{} // "sha256:<hex>" of each blob whose content has that digest
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return image{}, fmt.Errorf("%s: %w", path, err)
		}
		switch name := h.Name; {
		case name == "index.json":
			if index, err = io.ReadAll(tr); err != nil {
				return image{}, fmt.Errorf("%s: index.json: %w", path, err)
			}
		case strings.HasPrefix(name, "blobs/sha256/") && h.Typeflag == tar.TypeReg:
			sum := sha256.New()
			if _, err := io.Copy(sum, tr); err != nil {
				return image{}, fmt.Errorf("%s: %s: %w", path, name, err)
			}
			if got := hex.EncodeToString(sum.Sum(nil)); got == strings.TrimPrefix(name, "blobs/sha256/") {
				blobs["sha256:"+got] = true
			}
		}
	}
	if index == nil {
		return image{}, fmt.Errorf("%s: no index.json: not an OCI image layout", path)
	}
	var top struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(index, &top); err != nil {
		return image{}, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != ociImageIndex {
		return image{}, fmt.Errorf("%s: index.json holds %d descriptors, want one of an image index (%s)", path, len(top.Manifests), ociImageIndex)
	}
	d := top.Manifests[0]
	if !blobs[d.Digest] {
		return image{}, fmt.Errorf("%s: index.json names the image index %s, which the archive does not hold with that digest", path, d.Digest)
	}
	name := d.Annotations[imageNameAnnotation]
	colon := strings.LastIndex(name, ":")
	if colon < 0 || strings.Contains(name[colon:], "/") || !strings.HasSuffix(name[:colon], "/"+p.name) {
		return image{}, fmt.Errorf("%s: index.json names the image %q (annotation %s), want <registry>/%s:<version>", path, name, imageNameAnnotation, p.name)
	}
	return image{program: p, repository: name[:colon], tag: name[colon+1:], digest: d.Digest}, nil
}
