// Command image builds the container images of baremetal-ccm and baremetal-agent without a
// container engine, and pushes them.
//
//	image build -bin DIR -platforms linux/amd64,linux/arm64 -registry R -version V -revision SHA -source-date-epoch N [-programs baremetal-ccm,baremetal-agent] [-rootfs TREES]
//	image push -bin DIR -registry R -version V
//
// build reads the static binaries DIR/<os>_<arch>/<name> and writes, for each program, one
// OCI image index of an image per platform as an OCI image layout in a tar,
// DIR/<name>.oci.tar, named R/<name>:V for podman load, ctr images import and kind load
// image-archive. An image is the binary, /etc/passwd and /etc/group on an empty base: no
// shell, no package manager. Everything in it comes from the flags and the binaries, and
// every timestamp is -source-date-epoch (the commit's time): nothing reads the clock, so
// two builds of one commit are identical to the byte.
//
// -rootfs is for the tests' images: TREES/<os>_<arch> is a directory tree that each image
// of that platform holds too, beneath /, such as the shell, programs and shared libraries
// of make conformance-images' agnhost. Its files, links and directories keep their modes
// and nothing else of the machine: owned by root, dated -source-date-epoch.
//
// push pushes the index in each DIR/<name>.oci.tar to R/<name>:V, with the credentials
// that docker login or podman login stored.
//
// Run it with `make images` and `make push`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|push [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// build is the build command.
func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	bin := fs.String("bin", "bin", "directory of the binaries (<os>_<arch>/<name>) and of the archives written")
	platformList := fs.String("platforms", "linux/amd64,linux/arm64", "platforms of each index, comma-separated")
	registry := fs.String("registry", "", "registry and path the images are named under, e.g. ghcr.io/cloud-provider-baremetal")
	version := fs.String("version", "", "version: the images' tag and org.opencontainers.image.version")
	revision := fs.String("revision", "", "git commit built, for org.opencontainers.image.revision")
	epoch := fs.String("source-date-epoch", "", "Unix time of every timestamp in the images: the commit's")
	names := fs.String("programs", "baremetal-ccm,baremetal-agent", "programs to build an image of, comma-separated")
	trees := fs.String("rootfs", "", "directory of root file system trees (<os>_<arch>/), each added beneath / to the images of its platform; none if empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || *version == "" || *revision == "" || *epoch == "" {
		return errors.New("-registry, -version, -revision and -source-date-epoch are required")
	}
	created, err := parseEpoch(*epoch)
	if err != nil {
		return err
	}
	platforms, err := parsePlatforms(*platformList)
	if err != nil {
		return err
	}
	s := stamp{version: *version, revision: *revision, created: created}
	for _, name := range strings.Split(*names, ",") {
		p, err := lookup(name)
		if err != nil {
			return err
		}
		out, digest, err := buildArchive(p, *bin, *trees, platforms, *registry, s)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s:%s %s\n", out, repository(*registry, p), s.version, digest)
	}
	return nil
}

// buildArchive builds the index of p from the binaries under bin and, unless trees is
// empty, the root file system trees under it, and writes it to bin/<name>.oci.tar,
// returning that path and the index's digest.
func buildArchive(p program, bin, trees string, platforms []v1.Platform, registry string, s stamp) (string, v1.Hash, error) {
	binaries, rootfses := map[string]string{}, map[string]string{}
	for _, plat := range platforms {
		binaries[plat.String()] = filepath.Join(bin, plat.OS+"_"+plat.Architecture, p.name)
		if trees != "" {
			rootfses[plat.String()] = filepath.Join(trees, plat.OS+"_"+plat.Architecture)
		}
	}
	idx, err := buildIndex(p, binaries, rootfses, platforms, s)
	if err != nil {
		return "", v1.Hash{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("%s: %w", p.name, err)
	}
	out := filepath.Join(bin, p.name+".oci.tar")
	if err := writeArchive(out, idx, repository(registry, p)+":"+s.version, s.created); err != nil {
		return "", v1.Hash{}, err
	}
	return out, digest, nil
}

// push is the push command.
func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	bin := fs.String("bin", "bin", "directory of the archives that make images wrote")
	registry := fs.String("registry", "", "registry and path to push to, e.g. ghcr.io/cloud-provider-baremetal")
	version := fs.String("version", "", "tag to push")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || *version == "" {
		return errors.New("-registry and -version are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for _, p := range programs {
		ref := repository(*registry, p) + ":" + *version
		digest, err := pushArchive(ctx, filepath.Join(*bin, p.name+".oci.tar"), ref)
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", ref, digest)
	}
	return nil
}

// repository is where the images of p are named: registry/<name>.
func repository(registry string, p program) string {
	return strings.TrimSuffix(registry, "/") + "/" + p.name
}

// parseEpoch parses a Unix time in seconds, as SOURCE_DATE_EPOCH has it.
func parseEpoch(s string) (time.Time, error) {
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("-source-date-epoch %q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// parsePlatforms parses "linux/amd64,linux/arm64".
func parsePlatforms(s string) ([]v1.Platform, error) {
	var platforms []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(f)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("-platforms: %q is not os/arch", f)
		}
		platforms = append(platforms, *p)
	}
	return platforms, nil
}
