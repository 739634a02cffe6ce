package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the descriptor in an archive's index.json that name the image it holds.
const (
	// refNameAnnotation is the OCI image layout's name: podman load and skopeo read it.
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// containerdNameAnnotation is containerd's: ctr images import, and kind load
	// image-archive through it, name the image by it; podman prefers it too.
	containerdNameAnnotation = "io.containerd.image.name"
)

// ociLayout is the oci-layout file of an OCI image layout.
const ociLayout = `{"imageLayoutVersion":"1.0.0"}`

// writeArchive writes idx, named ref, as an OCI image layout in a tar to path: oci-layout,
// index.json, then every blob in digest order, each entry dated created, owned by root,
// so that the file depends on nothing but idx. The file appears whole or not at all.
func writeArchive(path string, idx v1.ImageIndex, ref string, created time.Time) error {
	blobs, err := indexBlobs(idx)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	desc, err := descriptorOf(idx)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	desc.Annotations = map[string]string{refNameAnnotation: ref, containerdNameAnnotation: ref}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     []v1.Descriptor{desc},
	})
	if err != nil {
		return fmt.Errorf("%s: index.json: %w", path, err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	add := func(name string, data []byte) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if strings.HasSuffix(name, "/") {
			h.Mode, h.Size, h.Typeflag = 0o755, 0, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
		return nil
	}
	if err := errors.Join(add("oci-layout", []byte(ociLayout)), add("index.json", index), add("blobs/", nil), add("blobs/sha256/", nil)); err != nil {
		tmp.Close()
		return err
	}
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		data, err := blobs[d]()
		if err != nil {
			tmp.Close()
			return fmt.Errorf("%s: blob %s: %w", path, d, err)
		}
		if err := add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), data); err != nil {
			tmp.Close()
			return err
		}
	}
	// Readable by all, as any build output; CreateTemp made it private.
	if err := errors.Join(tw.Close(), tmp.Chmod(0o644), tmp.Close()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// descriptorOf is the descriptor of idx itself.
func descriptorOf(idx v1.ImageIndex) (v1.Descriptor, error) {
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := idx.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: digest}, nil
}

// indexBlobs returns every blob of idx by digest: the index, its images' manifests and
// configs, and their layers.
func indexBlobs(idx v1.ImageIndex) (map[string]func() ([]byte, error), error) {
	blobs := map[string]func() ([]byte, error){}
	digest, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	blobs[digest.String()] = idx.RawManifest
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", m.Digest, err)
		}
		blobs[m.Digest.String()] = img.RawManifest
		config, err := img.ConfigName()
		if err != nil {
			return nil, fmt.Errorf("image %s: config: %w", m.Digest, err)
		}
		blobs[config.String()] = img.RawConfigFile
		layers, err := img.Layers()
		if err != nil {
			return nil, fmt.Errorf("image %s: layers: %w", m.Digest, err)
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return nil, fmt.Errorf("image %s: layer: %w", m.Digest, err)
			}
			blobs[d.String()] = func() ([]byte, error) {
				rc, err := l.Compressed()
				if err != nil {
					return nil, err
				}
				defer rc.Close()
				return io.ReadAll(rc)
			}
		}
	}
	return blobs, nil
}

// archive is an OCI image layout archive unpacked.
type archive struct {
	// index is the image index the archive holds.
	index v1.ImageIndex
	// annotations are those of its descriptor in index.json: the names of the image.
	annotations map[string]string
}

// readArchive unpacks the OCI image layout archive at path into dir, which must be empty
// and outlive the archive's use, and returns the one image index it holds.
func readArchive(path, dir string) (archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return archive{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return archive{}, fmt.Errorf("%s: %w", path, err)
		}
		if !layoutFile(h.Name) {
			return archive{}, fmt.Errorf("%s: %q is not a file of an OCI image layout", path, h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			var data bytes.Buffer
			if _, err = io.Copy(&data, tr); err == nil {
				if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
					err = os.WriteFile(target, data.Bytes(), 0o644)
				}
			}
		default:
			err = fmt.Errorf("entry of type %q", h.Typeflag)
		}
		if err != nil {
			return archive{}, fmt.Errorf("%s: %s: %w", path, h.Name, err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return archive{}, fmt.Errorf("%s: %w", path, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return archive{}, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex {
		return archive{}, fmt.Errorf("%s: index.json holds %d descriptors, want one of an image index", path, len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return archive{}, fmt.Errorf("%s: %w", path, err)
	}
	return archive{index: idx, annotations: im.Manifests[0].Annotations}, nil
}

// layoutFile reports whether name is a path an OCI image layout may hold, and nothing that
// would land outside the directory it is unpacked into.
func layoutFile(name string) bool {
	switch name {
	case "oci-layout", "index.json", "blobs/", "blobs/sha256/":
		return true
	}
	hex, ok := strings.CutPrefix(name, "blobs/sha256/")
	return ok && len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == ""
}
