package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// imagesEnv names the directory of the image archives that make images writes; make test
// sets it.
const imagesEnv = "BAREMETAL_IMAGES"

// TestRelease writes a release from the archives of make images, as make release does
// but without building them again, and checks what an operator gets: install.yaml runs
// each program from <repository>:<tag>@<the digest of its archive's image index> and a
// real API server takes it with a server-side apply; the packaged chart has the release's
// version and, with its default values, runs the very same images; SHA256SUMS covers
// every other file.
func TestRelease(t *testing.T) {
	bin := os.Getenv(imagesEnv)
	if bin == "" {
		requireInCI(t, "%s is not set: run make images, and the test with %s=<the directory of the archives>", imagesEnv, imagesEnv)
	}
	if _, err := render.Helm(); err != nil {
		requireInCI(t, "%v; run make helm", err)
	}
	// The archives' own word on what they hold: the version they were built as, and each
	// index's digest, from index.json (readImage checks the blob has that digest).
	want := map[string]string{} // program → the image reference install.yaml must run
	var version string
	for _, p := range programs {
		img, err := readImage(filepath.Join(bin, archiveName(p)), p)
		if err != nil {
			t.Fatal(err)
		}
		version = img.tag
		want[p.name] = img.repository + ":" + img.tag + "@" + img.digest
	}

	out := filepath.Join(t.TempDir(), version)
	if err := write(version, bin, out); err != nil {
		t.Fatal(err)
	}
	chart := chartName + "-" + strings.TrimPrefix(version, "v") + ".tgz"
	files := readDir(t, out)
	if wantFiles := []string{sumsFile, "baremetal-agent.oci.tar", "baremetal-ccm.oci.tar", chart, installFile}; !slices.Equal(files, wantFiles) {
		t.Errorf("the release holds %v, want %v", files, wantFiles)
	}
	checkSums(t, out)

	// install.yaml: the images, and an API server's acceptance.
	data, err := os.ReadFile(filepath.Join(out, installFile))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.DecodeObjects(data)
	if err != nil {
		t.Fatalf("%s: %v", installFile, err)
	}
	got := workloadImages(t, installFile, objs)
	for prog, ref := range want {
		if got[prog] != ref {
			t.Errorf("%s runs %s as %q, want %s", installFile, prog, got[prog], ref)
		}
	}
	cp := controlplane.Shared(t)
	if err := install.ApplyObjects(t.Context(), cp.AdminConfig(), objs); err != nil {
		t.Fatalf("server-side apply of %s: %v", installFile, err)
	}
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	d, err := client.AppsV1().Deployments("baremetal-system").Get(t.Context(), "baremetal-ccm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != want["baremetal-ccm"] {
		t.Errorf("the API server holds the Deployment baremetal-ccm with the image %s, want %s", img, want["baremetal-ccm"])
	}

	// The chart: its version, and the images of its default rendering.
	shown, err := render.RunHelm("show", "chart", filepath.Join(out, chart))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(shown, &meta); err != nil {
		t.Fatalf("helm show chart %s: %v\n%s", chart, err, shown)
	}
	if meta.Version != strings.TrimPrefix(version, "v") || meta.AppVersion != version {
		t.Errorf("%s: version %q, appVersion %q; want %q, %q", chart, meta.Version, meta.AppVersion, strings.TrimPrefix(version, "v"), version)
	}
	rendered, err := render.Chart(filepath.Join(out, chart), "baremetal-system")
	if err != nil {
		t.Fatal(err)
	}
	chartImages := workloadImages(t, chart, rendered)
	for prog, ref := range want {
		if chartImages[prog] != ref {
			t.Errorf("%s runs %s as %q by default, want %s as %s does", chart, prog, chartImages[prog], ref, installFile)
		}
	}
}

// workloadImages returns the image of each program in objs, rendered from what: the
// image of the Deployment or DaemonSet named after it, which must run one image only.
func workloadImages(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	images := map[string]string{}
	for _, o := range objs {
		refs := containerImages(o)
		if o.GetKind() != "Deployment" && o.GetKind() != "DaemonSet" {
			if len(refs) > 0 {
				t.Errorf("%s: %s %s runs %v", what, o.GetKind(), o.GetName(), refs)
			}
			continue
		}
		if len(slices.Compact(refs)) != 1 {
			t.Errorf("%s: %s %s runs %v, want one image", what, o.GetKind(), o.GetName(), refs)
			continue
		}
		images[o.GetName()] = refs[0]
	}
	return images
}

// checkSums checks dir/SHA256SUMS with sha256sum -c when there is one, and in any case
// that it lists every other file of dir with its sha256.
func checkSums(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, name := range readDir(t, dir) {
		if name == sumsFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&want, "%x  %s\n", sha256.Sum256(b), name)
	}
	if string(data) != want.String() {
		t.Errorf("%s:\n%s\nwant:\n%s", sumsFile, data, want.String())
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", sumsFile)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c %s: %v\n%s", sumsFile, err, out)
		}
	}
}

// readDir returns the names in dir, sorted.
func readDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// requireInCI skips the test, or fails it when $CI is true: CI must not pass by running
// nothing.
func requireInCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
