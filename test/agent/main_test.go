// Package agent measures the baremetal-agent binary as it runs on a node: a real process,
// against a real kube-apiserver and etcd, with the credentials the project's manifests
// grant its ServiceAccount.
package agent

import (
	"os"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m))
}
