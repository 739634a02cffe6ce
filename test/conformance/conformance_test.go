// Package conformance runs Kubernetes' own LoadBalancer specs, the [Feature:LoadBalancer]
// ones of e2e.test, against the project installed from its release on nodes that run the
// real kubelet, containerd and kube-proxy, from a client that reaches the Service
// addresses through a router. docs/conformance.md lists each spec and its expected
// result, which the test holds the run to. It needs root; `make conformance` runs it.
package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
)

func TestMain(m *testing.M) {
	// The $EDITOR of docs/install.md's commands, when the test binary runs as that.
	install.RunEditor()
	os.Exit(m.Run())
}

// Environment the test needs, which make conformance sets: the directory of the
// project's image archives and the version they were built as, the pause image's
// directory, and that of make conformance-images: the agnhost image the specs' pods run
// and the cluster DNS's.
const (
	imagesEnv       = "BAREMETAL_IMAGES"
	imageVersionEnv = "BAREMETAL_IMAGE_VERSION"
	nodeImagesEnv   = "BAREMETAL_NODE_IMAGES"
	conformanceEnv  = "BAREMETAL_CONFORMANCE_IMAGES"
)

// env returns the values of the environment variables names, or ends the test for want
// of one.
func env(t *testing.T, names ...string) []string {
	t.Helper()
	var values, missing []string
	for _, n := range names {
		v := os.Getenv(n)
		if v == "" {
			missing = append(missing, n)
		}
		values = append(values, v)
	}
	if len(missing) > 0 {
		ciMissing(t, "%s not set: run make conformance", strings.Join(missing, ", "))
	}
	return values
}

// cloudConfig has one pool on the nodes' segment; the routed client reaches it through
// the router.
const cloudConfig = `
pools:
- name: conformance
  addresses: [198.18.0.100-198.18.0.150]
`

// pauseArchive is the pause image's archive in the directory of make node-images.
func pauseArchive(dir string) string { return filepath.Join(dir, "baremetal-pause.oci.tar") }
