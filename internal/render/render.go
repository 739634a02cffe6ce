// Package render renders the project's install manifests and Helm chart as an operator
// would: the kustomize base and overlays with kustomize, as `kubectl kustomize` does, and
// the chart with `helm template`, run from the helm binary that `make helm` builds. The
// release tooling and the tests both use it.
package render

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/module"
)

// Render runs kustomize on dir, as `kubectl kustomize dir` does.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// YAML runs kustomize on dir and returns what `kubectl kustomize dir` prints: the
// objects as YAML documents.
func YAML(dir string) ([]byte, error) {
	resources, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	out, err := resources.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return out, nil
}

// kustomize runs kustomize on dir with kubectl's defaults.
func kustomize(dir string) (resmap.ResMap, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return resources, nil
}

// ManifestsDir returns the module's manifests/ folder.
func ManifestsDir() (string, error) {
	root, err := module.Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "manifests")
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
		return "", fmt.Errorf("no kustomization.yaml in the module's manifests: %w", err)
	}
	return dir, nil
}

// ReleaseName is the Helm release Chart renders the chart as.
const ReleaseName = "baremetal"

// ErrHelmNotFound is returned, wrapped, by Helm when the helm binary that `make helm`
// builds is not there.
var ErrHelmNotFound = errors.New("helm not found")

// Helm returns the path of the helm binary in the tools directory (module.BinDir), where
// `make helm` builds it.
func Helm() (string, error) {
	dir, err := module.BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "helm")
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: no executable %s", ErrHelmNotFound, path)
	}
	return path, nil
}

// ChartDir returns the chart of the module, charts/cloud-provider-baremetal.
func ChartDir() (string, error) {
	manifests, err := ManifestsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(manifests), "charts", "cloud-provider-baremetal"), nil
}

// RunHelm runs helm with args and returns its standard output; the error quotes its
// standard error.
func RunHelm(args ...string) ([]byte, error) {
	helm, err := Helm()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(helm, args...)
	// Helm keeps a cache, a config and a repository list under $HOME: a test's are its own.
	home, err := os.MkdirTemp("", "baremetal-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// Chart runs `helm template` on the chart in dir as ReleaseName in namespace, with
// more helm arguments such as --set or --values, and decodes every object it renders.
func Chart(dir, namespace string, args ...string) ([]*unstructured.Unstructured, error) {
	out, err := RunHelm(append([]string{"template", ReleaseName, dir, "--namespace", namespace}, args...)...)
	if err != nil {
		return nil, err
	}
	return DecodeObjects(out)
}

// DecodeObjects decodes a stream of YAML documents, such as helm's output, into objects;
// empty documents are left out.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("YAML document %d: %w", i, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("YAML document %d: %w\n%s", i, err, doc)
		}
		objs = append(objs, obj)
	}
}
