// Package chart tests the Helm chart, charts/cloud-provider-baremetal: that it passes
// `helm lint`, that its default rendering is the kustomize base's install, that what it
// installs in a real control plane runs both programs, and that its alerts fire when they
// should, with promtool.
package chart

import (
	"errors"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}

// namespace is where the tests install the chart, the namespace of manifests/base.
const namespace = "baremetal-system"

// chartDir returns the chart's directory, and ends the test if there is no helm to run
// on it: skipped outside CI, failed in CI, which must not pass by running nothing.
func chartDir(t testing.TB) string {
	t.Helper()
	if _, err := render.Helm(); err != nil {
		if errors.Is(err, render.ErrHelmNotFound) && !ci.Running() {
			t.Skipf("%v; run `make helm` to build it into hack/tools/bin, or set %s", err, controlplane.BinDirEnv)
		}
		t.Fatal(err)
	}
	dir, err := render.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// renderChart returns the chart's objects rendered with args (--set, --values) into namespace.
func renderChart(t testing.TB, args ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.Chart(chartDir(t), namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the rendered object of kind and name, or ends the test.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil
}
