package render

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

// TestRender checks that the manifests render, and that every namespaced object says where
// it goes: the base sets no namespace for them.
func TestRender(t *testing.T) {
	dir, err := ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	clusterScoped := map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if !clusterScoped[o.GetKind()] && o.GetNamespace() == "" {
			t.Errorf("%s %s has no namespace", o.GetKind(), o.GetName())
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "Deployment", "DaemonSet", "ConfigMap"} {
		if kinds[k] == 0 {
			t.Errorf("no %s rendered; got %v", k, kinds)
		}
	}
}

// TestRenderExample checks that the example overlay renders, with its own cloud-config in
// place of the base's, mounted by both binaries, and valid.
func TestRenderExample(t *testing.T) {
	dir, err := ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(filepath.Join(dir, "example"))
	if err != nil {
		t.Fatal(err)
	}
	var configMap string
	mounted := map[string]bool{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			configMap = o.GetName()
			data, _, _ := unstructured.NestedString(o.Object, "data", "cloud-config.yaml")
			if _, err := config.Parse("example/cloud-config.yaml", []byte(data)); err != nil {
				t.Errorf("the example's cloud-config: %v", err)
			}
			if !strings.Contains(data, "name: internal") {
				t.Errorf("the ConfigMap holds the base's cloud-config, not the example's:\n%s", data)
			}
		case "Deployment", "DaemonSet":
			// NoCopy: the rendered objects hold plain ints, which a deep copy refuses.
			volumes, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "volumes")
			for _, v := range volumes.([]any) {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "configMap", "name")
				mounted[o.GetKind()+"/"+name] = true
			}
			containers, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
			image, _, _ := unstructured.NestedString(containers.([]any)[0].(map[string]any), "image")
			if !strings.HasSuffix(image, ":v0.1.0") {
				t.Errorf("%s %s runs %s, want the overlay's tag", o.GetKind(), o.GetName(), image)
			}
		}
	}
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if !mounted[kind+"/"+configMap] {
			t.Errorf("the %s does not mount the ConfigMap %s; mounts %v", kind, configMap, mounted)
		}
	}
}
