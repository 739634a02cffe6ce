package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
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
	// path is where the binary sits in the image, absolute; empty is binDir/<name>.
	path string
	// cmd is the image's CMD: the arguments of the binary when a container gives none.
	cmd []string
}

// entrypoint is the path of p's binary in its image, which the image runs.
func (p program) entrypoint() string {
	if p.path != "" {
		return p.path
	}
	return binDir + "/" + p.name
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
	{
		name:        "agnhost",
		description: "Kubernetes' e2e test image agnhost (k8s.io/kubernetes/test/images/agnhost), with only the userland of the specs run against the project: sh, curl, wget and OpenBSD nc",
		// Root, as upstream's image: the specs' servers listen on port 80.
		user: "0:0",
		// Where upstream's image has it, and its CMD: pods give only agnhost's arguments
		// (netexec --http-port=80), and a pod that gives none pauses.
		path: "/agnhost",
		cmd:  []string{"pause"},
	},
	{
		name:        "coredns",
		description: "CoreDNS (github.com/coredns/coredns), the cluster DNS of the conformance test's cluster",
		// Unprivileged: it listens above 1024, and its Service maps port 53 there.
		user: nonroot,
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
// that binaries names for the platform ("linux/amd64") and the root file system tree that
// trees names for it, if any.
func buildIndex(p program, binaries, trees map[string]string, platforms []v1.Platform, s stamp) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, plat := range platforms {
		path, ok := binaries[plat.String()]
		if !ok {
			return nil, fmt.Errorf("%s: no binary for %s", p.name, plat)
		}
		img, err := buildImage(p, plat, path, trees[plat.String()], s)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return mutate.Annotations(idx, s.annotations(p)).(v1.ImageIndex), nil
}

// buildImage builds the image of p for plat around the binary at path and, unless tree is
// empty, the root file system tree in the directory tree.
func buildImage(p program, plat v1.Platform, path, tree string, s stamp) (v1.Image, error) {
	binary, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s for %s: %w", p.name, plat, err)
	}
	createdBy := "make images: " + filepath.Base(path) + ", /etc/passwd, /etc/group"
	var extra []entry
	if tree != "" {
		if extra, err = readTree(tree); err != nil {
			return nil, fmt.Errorf("%s for %s: -rootfs: %w", p.name, plat, err)
		}
		createdBy += fmt.Sprintf(", %d entries of a root file system tree", len(extra))
	}
	layer, err := rootfs(p, binary, extra, s.created)
	if err != nil {
		return nil, fmt.Errorf("%s for %s: layer: %w", p.name, plat, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: s.created},
			CreatedBy: createdBy,
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
		Entrypoint: []string{p.entrypoint()},
		Cmd:        p.cmd,
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

// entry is one directory, regular file or symbolic link of a layer.
type entry struct {
	// name is the path below /, with no slash at either end.
	name string
	// typ is tar.TypeDir, tar.TypeReg or tar.TypeSymlink.
	typ      byte
	mode     int64
	uid, gid int
	data     []byte // of a regular file
	link     string // target of a symbolic link, as it is written
}

// dir is a directory of a layer, owned by root.
func dir(name string, mode int64) entry {
	return entry{name: name, typ: tar.TypeDir, mode: mode}
}

// file is a regular file of a layer, owned by root.
func file(name string, mode int64, data []byte) entry {
	return entry{name: name, typ: tar.TypeReg, mode: mode, data: data}
}

// tarName is the name of e in a tar: a directory's ends in a slash, as GNU tar writes it.
func (e entry) tarName() string {
	if e.typ == tar.TypeDir {
		return e.name + "/"
	}
	return e.name
}

// rootfs is the one layer of an image of p: the binary, /etc/passwd and /etc/group, the
// users' homes, the directories above them, and the entries of tree (readTree). The tar is
// written by hand rather than from a directory, so that nothing of the machine that builds
// it (file times, owners, umask, the order a directory lists in) ends up in it.
func rootfs(p program, binary []byte, tree []entry, created time.Time) (v1.Layer, error) {
	own := []entry{
		dir("etc", 0o755),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("home", 0o755),
		{name: "home/nonroot", typ: tar.TypeDir, mode: 0o700, uid: 65532, gid: 65532},
		dir("root", 0o700),
	}
	bin := strings.TrimPrefix(p.entrypoint(), "/")
	for d := path.Dir(bin); d != "."; d = path.Dir(d) {
		own = append(own, dir(d, 0o755))
	}
	own = append(own, file(bin, 0o755, binary))
	entries := map[string]entry{}
	for _, e := range own {
		entries[e.name] = e
	}
	for _, e := range tree {
		mine, ok := entries[e.name]
		if !ok {
			entries[e.name] = e
			continue
		}
		// A directory that the image has too stays the image's, with its owner and mode:
		// /root and /home/nonroot are private. Anything else would replace a file the
		// image depends on, or put a link where the image has a directory.
		if mine.typ != tar.TypeDir || e.typ != tar.TypeDir {
			return nil, fmt.Errorf("/%s: the tree has one, and the image has its own", e.name)
		}
	}
	// In name order, which puts every directory before what it holds.
	sorted := slices.SortedFunc(maps.Values(entries), func(a, b entry) int { return cmp.Compare(a.tarName(), b.tarName()) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range sorted {
		h := &tar.Header{
			Typeflag: e.typ,
			Name:     e.tarName(),
			Linkname: e.link,
			Size:     int64(len(e.data)),
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  created,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
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
