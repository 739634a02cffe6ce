// Command release writes the files of a release of cloud-provider-baremetal into one
// directory, from the image archives that `make images` built with the release's version:
//
//	release -version vX.Y.Z -images DIR -out DIR
//	release -version vX.Y.Z -check
//
// The directory gets:
//
//   - baremetal-ccm.oci.tar and baremetal-agent.oci.tar, the archives, copied;
//   - install.yaml, manifests/base rendered by kustomize with the images of the archives
//     pinned by the digests of their image indexes (repository:vX.Y.Z@sha256:...);
//   - cloud-provider-baremetal-X.Y.Z.tgz, the Helm chart packaged with version X.Y.Z and
//     appVersion vX.Y.Z, whose values pin the same images by the same digests;
//   - SHA256SUMS, the sha256 of every other file, for `sha256sum -c`.
//
// It is written beside -out and renamed into place, so that -out holds one whole release
// or none. -check only checks that -version is vMAJOR.MINOR.PATCH, with an optional
// -prerelease. Run it with `make release VERSION=vX.Y.Z`.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// program is one of the project's programs, as the release holds it.
type program struct {
	// name is the binary's and the image's: baremetal-ccm.
	name string
	// values is the chart's values key of its settings: ccm.
	values string
}

// programs are the programs of a release.
var programs = []program{
	{name: "baremetal-ccm", values: "ccm"},
	{name: "baremetal-agent", values: "agent"},
}

// archiveName is the file name of p's image archive, in the directory `make images`
// writes and in a release.
func archiveName(p program) string { return p.name + ".oci.tar" }

func main() {
	version := flag.String("version", "", "the release's version, vMAJOR.MINOR.PATCH[-prerelease]: the images' tag and the chart's appVersion")
	check := flag.Bool("check", false, "only check -version")
	imagesDir := flag.String("images", "", "directory of the image archives that make images built with -version")
	out := flag.String("out", "", "directory to write the release into; replaced if it exists")
	flag.Parse()
	err := checkVersion(*version)
	if err == nil && !*check {
		if *imagesDir == "" || *out == "" {
			err = fmt.Errorf("-images and -out are required")
		} else {
			err = write(*version, *imagesDir, *out)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

// write writes the release version into out from the archives in imagesDir, and lists
// what it wrote.
func write(version, imagesDir, out string) error {
	var images []image
	for _, p := range programs {
		img, err := readImage(filepath.Join(imagesDir, archiveName(p)), p)
		if err != nil {
			return err
		}
		if img.tag != version {
			return fmt.Errorf("%s names the image %s, not of version %s: build the images with make images VERSION=%s",
				filepath.Join(imagesDir, archiveName(p)), img.name(), version, version)
		}
		images = append(images, img)
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, p := range programs {
		if err := copyFile(filepath.Join(imagesDir, archiveName(p)), filepath.Join(tmp, archiveName(p))); err != nil {
			return err
		}
	}
	install, err := renderInstall(version, images)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, installFile), install, 0o644); err != nil {
		return err
	}
	if _, err := packageChart(version, images, tmp); err != nil {
		return err
	}
	if err := writeSums(tmp); err != nil {
		return err
	}
	// Readable by all, as any build output; MkdirTemp made it private.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}

	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	fmt.Printf("release %s in %s:\n", version, out)
	for _, e := range entries {
		fmt.Printf("  %s\n", e.Name())
	}
	for _, img := range images {
		fmt.Printf("  image %s\n", img.ref())
	}
	return nil
}

// copyFile copies the file from to the new file to, readable by all.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return out.Close()
}
