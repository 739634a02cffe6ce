package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// source is the repository the images are built from, for org.opencontainers.image.source.
const source = "https://github.com/cloud-provider-baremetal/cloud-provider-baremetal"

// binDir is where a program's binary sits in its image.
const binDir = "/usr/local/bin"

// nonroot is the user of an image that needs no privilege, as distroless names it. Numeric,
// because the kubelet can only enforce runAsNonRoot on a numeric image user.
const nonroot = "65532:65532"

// program is one of the project's binaries and how its image runs it.
type program struct {
	name        string
	description string
	// user is the image's USER, uid:gid.
	user string
}

// programs are the images the project ships.
var programs = []program{
	{
		name:        "baremetal-ccm",
		description: "cloud-controller-manager of cloud-provider-baremetal: hands out LoadBalancer addresses and picks the node announcing each",
		// It needs no privilege; its Deployment sets runAsNonRoot.
		user: nonroot,
	},
	{
		name:        "baremetal-agent",
		description: "node agent of cloud-provider-baremetal: answers ARP and NDP for the addresses its node announces",
		// Root: the agent answers ARP and NDP on raw sockets, with NET_RAW, and clears
		// connection-tracking entries with NET_ADMIN, the capabilities its DaemonSet adds.
		// A capability added to a container is effective only for root: Kubernetes gives
		// a non-root process no ambient capabilities, so a non-root agent could open no
		// raw socket.
		user: "0:0",
	},
}

// testPrograms are images that only the tests run.
var testPrograms = []program{
	{
		name:        "baremetal-pause",
		description: "pod sandbox process of the install test's containerd: holds a pod's namespaces until SIGTERM",
		user:        nonroot,
	},
}

// lookup returns the program named name.
func lookup(name string) (program, error) {
	for _, p := range slices.Concat(programs, testPrograms) {
		if p.name == name {
			return p, nil
		}
	}
	return program{}, fmt.Errorf("no image is built for %q", name)
}

// stamp is what an image says about where it came from. It is all that an image holds
// besides its binary, so two builds with one stamp and the same binaries are identical.
type stamp struct {
	// version is the release, the image's tag.
	version string
	// revision is the git commit built.
	revision string
	// created is the commit's time: every timestamp in the image. Never the clock's,
	// which would make every build differ.
	created time.Time
}

// annotations are the OCI annotations of an image of p, which its config also carries as
// labels: https://github.com/opencontainers/image-spec/blob/main/annotations.md
func (s stamp) annotations(p program) map[string]string {
	// No org.opencontainers.image.licenses: the repository declares no licence yet.
	return map[string]string{
		"org.opencontainers.image.title":       p.name,
		"org.opencontainers.image.description": p.description,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.revision":    s.revision,
		"org.opencontainers.image.version":     s.version,
		"org.opencontainers.image.created":     s.created.UTC().Format(time.RFC3339),
	}
}

// buildIndex builds the image index of p: one image per platform, each around the binary
// that binaries names for the platform ("linux/amd64").
func buildIndex(p program, binaries map[string]string, platforms []v1.Platform, s stamp) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, plat := range platforms {
		path, ok := binaries[plat.String()]
		if !ok {
			return nil, fmt.Errorf("%s: no binary for %s", p.name, plat)
		}
		img, err := buildImage(p, plat, path, s)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return mutate.Annotations(idx, s.annotations(p)).(v1.ImageIndex), nil
}

// buildImage builds the image of p for plat around the binary at path.
func buildImage(p program, plat v1.Platform, path string, s stamp) (v1.Image, error) {
	binary, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s for %s: %w", p.name, plat, err)
	}
	layer, err := rootfs(p, binary, s.created)
	if err != nil {
		return nil, fmt.Errorf("%s for %s: layer: %w", p.name, plat, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: s.created},
			CreatedBy: "make images: " + filepath.Base(path) + ", /etc/passwd, /etc/group",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s for %s: %w", p.name, plat, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s for %s: config: %w", p.name, plat, err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: s.created}
	cf.OS = plat.OS
	cf.Architecture = plat.Architecture
	cf.Variant = plat.Variant
	cf.Config = v1.Config{
		Entrypoint: []string{binDir + "/" + p.name},
		User:       p.user,
		WorkingDir: "/",
		Labels:     s.annotations(p),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("%s for %s: config: %w", p.name, plat, err)
	}
	return mutate.Annotations(img, s.annotations(p)).(v1.Image), nil
}

// passwd and group hold root and the distroless nonroot user, so that both users an image
// runs as have a name. There is no shell: the login shell is one that refuses.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or directory of a layer.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte // nil for a directory
}

// rootfs is the one layer of an image of p: the binary, /etc/passwd and /etc/group, the
// users' homes, and the directories above them. The tar is written by hand rather than
// from a directory, so that nothing of the machine that builds it (file times, owners,
// umask, the order a directory lists in) ends up in it.
func rootfs(p program, binary []byte, created time.Time) (v1.Layer, error) {
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		{name: "root/", mode: 0o700},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/" + p.name, mode: 0o755, data: binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created,
			Format:  tar.FormatUSTAR,
		}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layerFromTar(buf.Bytes())
}

// layerFromTar is an OCI layer of the uncompressed tar b, gzipped once and kept. gzip's
// default level: its best saves 0.2% of a binary's layer for twice the time.
func layerFromTar(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.DefaultCompression),
		tarball.WithCompressedCaching,
	)
}
