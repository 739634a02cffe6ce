package install

import (
	"testing"
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
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "Deployment", "ConfigMap"} {
		if kinds[k] == 0 {
			t.Errorf("no %s rendered; got %v", k, kinds)
		}
	}
}
