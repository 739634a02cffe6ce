package node

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// pauseImage is the name make node-images gives the pause image, which containerd runs as
// every pod's sandbox.
const pauseImage = "localhost/baremetal-test/baremetal-pause:test"

// kubeletHealthz is where the kubelet serves /healthz, on its node's loopback.
const kubeletHealthz = "127.0.0.1:10248"

// writeContainerdConfig writes containerd's configuration (version 3, containerd 2) for a
// node whose files are under dir and whose API is the socket.
func writeContainerdConfig(path, dir, socket string, podSubnet netip.Prefix) error {
	cni := filepath.Join(dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	// A bridge on the node's pod range, as clusters with a bridge CNI plugin have: pods
	// are routed, not translated, from and to the other nodes.
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cbr0", "isGateway": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "rangeStart": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`, podSubnet, podSubnet.Addr().Next().Next().String(), podSubnet.Addr().Next().String())
	if err := os.WriteFile(filepath.Join(cni, "10-pods.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
# NRI's socket is one path for the whole machine, which a second containerd cannot take.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = %q

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which a machine that runs
  # the tests in a container may not have: the sandbox's -998 would make runc fail.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the node's directory, not in the machine's
  # /var/run/netns: Close unmounts them with the rest, and a test never leaves one behind.
  netns_mounts_under_state_dir = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%q]
  conf_dir = %q

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), socket, pauseImage, cniBinDir, cni, runcPath)
	return os.WriteFile(path, []byte(config), 0o644)
}

// writeKubeletConfig writes the kubelet's configuration for a node whose files are under
// dir and whose runtime's API is the socket. The kubelets of a test share one machine:
// none enforces node allocatable or QoS cgroups, none evicts for the machine's disk or
// memory, and each keeps its logs in its own directory. Pods get clusterDNS as their
// name server, when it is valid, and no other: nothing of the machine's resolv.conf.
func writeKubeletConfig(path, dir, socket string, clusterDNS netip.Addr) error {
	resolvConf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolvConf, nil, 0o644); err != nil {
		return err
	}
	var dns []string
	if clusterDNS.IsValid() {
		dns = []string{"clusterDNS: [" + clusterDNS.String() + "]", "clusterDomain: cluster.local"}
	}
	config := strings.Join(append(dns,
		"apiVersion: kubelet.config.k8s.io/v1beta1",
		"kind: KubeletConfiguration",
		"containerRuntimeEndpoint: unix://"+socket,
		"podLogsDir: "+filepath.Join(dir, "pod-logs"),
		"cgroupDriver: cgroupfs",
		// Machines that run the tests may still have cgroup v1.
		"failCgroupV1: false",
		"cgroupsPerQOS: false",
		"enforceNodeAllocatable: []",
		"failSwapOn: false",
		"evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}",
		"imageGCHighThresholdPercent: 100",
		"imageGCLowThresholdPercent: 99",
		"readOnlyPort: 0",
		"healthzBindAddress: "+strings.Split(kubeletHealthz, ":")[0],
		"healthzPort: "+strings.Split(kubeletHealthz, ":")[1],
		// Anyone may call the kubelet's API (logs, exec): the API server's proxy into the
		// test network does, without credentials.
		"authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}",
		"authorization: {mode: AlwaysAllow}",
		// A Node's status, and a pod's, reach the API server sooner.
		"nodeStatusUpdateFrequency: 2s",
		"syncFrequency: 10s",
		"resolvConf: "+resolvConf,
		"",
	), "\n")
	return os.WriteFile(path, []byte(config), 0o644)
}
