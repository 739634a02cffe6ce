package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// installFile is the release's file of every object of the install, for kubectl apply -f.
const installFile = "install.yaml"

// baseRegistry is where manifests/base names the images: the kustomization of the
// release replaces <baseRegistry>/<program> with the release's images.
const baseRegistry = "ghcr.io/cloud-provider-baremetal"

// renderInstall renders manifests/base as install.yaml of release version: through a
// kustomization of its own whose images: pin each program's image to its digest, as an
// overlay of the operator's would, and with a header that says what to edit before
// applying it.
func renderInstall(version string, images []image) ([]byte, error) {
	manifests, err := render.ManifestsDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "baremetal-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// Kustomize takes no absolute path of a base.
	base, err := filepath.Rel(dir, filepath.Join(manifests, "base"))
	if err != nil {
		return nil, err
	}
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{base},
	}
	for _, img := range images {
		k.Images = append(k.Images, types.Image{Name: baseRegistry + "/" + img.program.name, NewName: img.repository, NewTag: img.tag, Digest: img.digest})
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), data, 0o644); err != nil {
		return nil, err
	}
	rendered, err := render.YAML(dir)
	if err != nil {
		return nil, err
	}

	// What the header names, and a check that every container runs a release's image: a
	// program added to the base under another image name would otherwise run :latest.
	objs, err := render.DecodeObjects(rendered)
	if err != nil {
		return nil, fmt.Errorf("kustomize of manifests/base: %w", err)
	}
	refs := map[string]bool{}
	for _, img := range images {
		refs[img.ref()] = true
	}
	var configMap string
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "cloud-config") {
			configMap = o.GetNamespace() + "/" + o.GetName()
		}
		for _, ref := range containerImages(o) {
			if !refs[ref] {
				return nil, fmt.Errorf("manifests/base: %s %s runs %s, not an image of the release", o.GetKind(), o.GetName(), ref)
			}
		}
	}
	if configMap == "" {
		return nil, fmt.Errorf("manifests/base renders no ConfigMap cloud-config")
	}
	return append(installHeader(version, configMap, images), rendered...), nil
}

// installHeader is the comment at the top of install.yaml: what it is and what to do
// before applying it.
func installHeader(version, configMap string, images []image) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `# cloud-provider-baremetal %s: every object of the install (docs/install.md, Install).
#
# Before kubectl apply -f install.yaml:
#  1. Put your pools in cloud-config.yaml of the ConfigMap
#     %s below, in place of the documentation addresses there:
#     addresses of your nodes' layer-2 network that nothing else uses. Do the same in the
#     next release's install.yaml before applying it: its example pools would move your
#     Services to their addresses.
#  2. Create the Secrets baremetal-system/baremetal-probe-key (the probe key and the
#     ccm's public key) and baremetal-system/baremetal-verdict-key (its private key)
#     (docs/install.md, Install, step 3).
#
# The images, pinned by the digests of their image indexes (the archives of the release):
`, version, configMap)
	for _, img := range images {
		fmt.Fprintf(&b, "#   %s\n", img.ref())
	}
	return []byte(b.String())
}

// containerImages returns the image of every container and init container of a
// workload's pod template, or of a Pod.
func containerImages(o *unstructured.Unstructured) []string {
	spec := []string{"spec", "template", "spec"}
	if o.GetKind() == "Pod" {
		spec = []string{"spec"}
	}
	var refs []string
	for _, field := range []string{"initContainers", "containers"} {
		// NoCopy: rendered objects hold plain ints, which a deep copy refuses.
		list, _, _ := unstructured.NestedFieldNoCopy(o.Object, append(spec, field)...)
		containers, _ := list.([]any)
		for _, c := range containers {
			if ref, ok := c.(map[string]any)["image"].(string); ok {
				refs = append(refs, ref)
			}
		}
	}
	return refs
}
