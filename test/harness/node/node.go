// Package node runs a Kubernetes node in a test namespace as a cluster runs one: the real
// containerd with its CRI, its runc shim and Debian's runc, and the real kubelet, which
// registers the Node with a real control plane and runs the Pods bound to it. Both
// programs run in the node's network namespace and in the machine's mount namespace, so
// that the volumes the kubelet mounts are those containerd gives the containers; each node
// has directories of its own for everything else. Pods with hostNetwork share the node's
// network namespace, as on a real node; the install test (test/e2e) runs the project's
// DaemonSet and Deployment on such nodes. It needs root.
package node

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// Where the programs that are not built by the tools modules come from: Debian's runc and
// containernetworking-plugins.
const (
	runcPath   = "/usr/sbin/runc"
	cniBinDir  = "/usr/lib/cni"
	stopGrace  = 10 * time.Second
	startLimit = 2 * time.Minute
	// logTailLines is how much of a log a start error quotes.
	logTailLines = 30
	// containerLogLines is how much of each container's log Logs quotes.
	containerLogLines = 80
)

// Config is what a node is made of.
type Config struct {
	// Host is the node's namespace; its Label is the Node's name.
	Host *netns.Host
	// Dir holds the node's files: containerd's root, state and socket, the kubelet's root
	// and configuration. Its path must be short: containerd's socket is in it.
	Dir string
	// Kubeconfig is the kubelet's: the API server as reached from inside Host, and the
	// node's credentials.
	Kubeconfig string
	// PodSubnet is the node's pod range, which its CNI configuration hands out addresses
	// of on the bridge cbr0, its first address the pods' gateway.
	PodSubnet netip.Prefix
	// PauseArchive is the OCI archive of the image that holds each pod's namespaces
	// (make node-images builds one), imported before the kubelet starts.
	PauseArchive string
	// ClusterDNS, when valid, is the name server of the pods, with cluster.local their
	// domain: the ClusterIP of the cluster DNS's Service.
	ClusterDNS netip.Addr
}

// Node is a running containerd and kubelet. Its methods are safe for concurrent use.
type Node struct {
	cfg        Config
	socket     string
	containerd *process.Process
	kubelet    *process.Process

	closeOnce sync.Once
	closeErr  error
}

// Start starts containerd in cfg.Host, imports the pause image, and starts the kubelet,
// which registers the Node. It returns once both run; the Node's readiness is for the
// caller to wait for, through the API server. ctx bounds only the start. A missing binary
// gives an error wrapping controlplane.ErrBinaryNotFound.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	for _, p := range []string{runcPath, filepath.Join(cniBinDir, "bridge")} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("node %s: %s is needed (Debian: apt-get install runc containernetworking-plugins): %w", cfg.Host.Label, p, err)
		}
	}
	n := &Node{cfg: cfg, socket: filepath.Join(cfg.Dir, "containerd.sock")}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	pause, err := n.Import(ctx, cfg.PauseArchive)
	if err != nil {
		return nil, err
	}
	if pause != pauseImage {
		return nil, fmt.Errorf("node %s: %s holds %s, want %s", cfg.Host.Label, cfg.PauseArchive, pause, pauseImage)
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// command returns a command that runs the program at path in the node's network
// namespace only, unlike netns.Host.Command, which gives it a mount namespace of its own:
// containerd must see what the kubelet mounts.
func (n *Node) command(path string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.cfg.Host.Path(), "--", path}, args...)...)
	bin, _ := controlplane.BinDir()
	// containerd finds its shim on PATH.
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	return cmd
}

func (n *Node) startContainerd(ctx context.Context) error {
	bin, err := controlplane.Binary("containerd")
	if err != nil {
		return err
	}
	config := filepath.Join(n.cfg.Dir, "containerd.toml")
	if err := writeContainerdConfig(config, n.cfg.Dir, n.socket, n.cfg.PodSubnet); err != nil {
		return err
	}
	if n.containerd, err = process.StartCmd("containerd on "+n.cfg.Host.Label, n.command(bin, "--config="+config)); err != nil {
		return err
	}
	return n.wait(ctx, n.containerd, func() error {
		_, err := n.Ctr(ctx, "version")
		return err
	})
}

func (n *Node) startKubelet(ctx context.Context) error {
	bin, err := controlplane.Binary("kubelet")
	if err != nil {
		return err
	}
	config := filepath.Join(n.cfg.Dir, "kubelet.yaml")
	if err := writeKubeletConfig(config, n.cfg.Dir, n.socket, n.cfg.ClusterDNS); err != nil {
		return err
	}
	h := n.cfg.Host
	if n.kubelet, err = process.StartCmd("kubelet on "+h.Label, n.command(bin,
		"--config="+config,
		"--kubeconfig="+n.cfg.Kubeconfig,
		"--root-dir="+filepath.Join(n.cfg.Dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.cfg.Dir, "kubelet", "pki"),
		"--hostname-override="+h.Label,
		// Of the pods' family only, as a single-stack cluster's nodes: Kubernetes' specs
		// check a node's health check node port at each InternalIP, which kube-proxy
		// serves on the Service's family only. It is also the address the ccm probes.
		"--node-ip="+n.nodeIP().String(),
		"--v=1",
	)); err != nil {
		return err
	}
	// The kubelet's /healthz, on the node's own loopback, passes once its sync loop
	// runs.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: h.Dial, DisableKeepAlives: true}}
	return n.wait(ctx, n.kubelet, func() error {
		resp, err := client.Get("http://" + kubeletHealthz + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("kubelet /healthz: %s", resp.Status)
		}
		return nil
	})
}

// wait polls check until it passes, p exits or ctx ends.
func (n *Node) wait(ctx context.Context, p *process.Process, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited while starting: %v\n%s", p.Name(), p.ExitError(), p.Tail(logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s did not start: %v (last: %v)\n%s", p.Name(), context.Cause(ctx), err, p.Tail(logTailLines))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ctr runs ctr against the node's containerd, in the namespace the CRI keeps its images
// and containers in, as docs/install.md's commands do on a node (`ctr -n k8s.io ...`), and returns
// its standard output.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	bin, err := controlplane.Binary("ctr")
	if err != nil {
		return "", err
	}
	full := append([]string{"--address", n.socket, "-n", "k8s.io"}, args...)
	// Only stdout is the answer: ctr can write to stderr when it succeeds, and a caller
	// parses what it lists.
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("node %s: ctr %s: %w: %s", n.cfg.Host.Label, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Import imports the OCI archive at path with `ctr -n k8s.io images import
// --all-platforms`, as docs/install.md says, and returns the name containerd gives the image: the
// one its index.json says.
func (n *Node) Import(ctx context.Context, path string) (string, error) {
	name, err := archiveImage(path)
	if err != nil {
		return "", err
	}
	if _, err := n.Ctr(ctx, "images", "import", "--all-platforms", path); err != nil {
		return "", err
	}
	return name, nil
}

// archiveImage returns the name of the image in the OCI archive at path, from the
// annotation of its index.json that ctr names an imported image by.
func archiveImage(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("%s: no index.json: %w", path, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", fmt.Errorf("%s: index.json: %w", path, err)
		}
		if len(index.Manifests) != 1 || index.Manifests[0].Annotations[imageNameAnnotation] == "" {
			return "", fmt.Errorf("%s: index.json names no single image by %s", path, imageNameAnnotation)
		}
		return index.Manifests[0].Annotations[imageNameAnnotation], nil
	}
}

// imageNameAnnotation is the annotation of an index.json entry that ctr images import
// names the image by.
const imageNameAnnotation = "io.containerd.image.name"

// Logs returns what containerd and the kubelet have printed, and the end of the log of
// every container the kubelet ran, for a failed test.
func (n *Node) Logs() string {
	var b strings.Builder
	for _, p := range []*process.Process{n.containerd, n.kubelet} {
		if p != nil {
			fmt.Fprintf(&b, "%s log:\n%s\n", p.Name(), p.Logs())
		}
	}
	// The kubelet keeps them as <namespace>_<pod>_<uid>/<container>/<restart>.log.
	logs, _ := filepath.Glob(filepath.Join(n.cfg.Dir, "pod-logs", "*", "*", "*.log"))
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > containerLogLines {
			lines = lines[len(lines)-containerLogLines:]
		}
		rel, _ := filepath.Rel(filepath.Join(n.cfg.Dir, "pod-logs"), path)
		fmt.Fprintf(&b, "container %s on %s, last %d lines:\n%s\n", rel, n.cfg.Host.Label, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// Close stops the kubelet and containerd, kills what they left running in the node's
// namespace (the shims and the containers of hostNetwork pods), and unmounts what they
// left mounted under the node's directory, so that it can be removed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		for _, p := range []*process.Process{n.kubelet, n.containerd} {
			if p != nil {
				if err := p.Stop(stopGrace); err != nil {
					errs = append(errs, err)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		errs = append(errs, n.cfg.Host.KillAll(ctx), unmountUnder(n.cfg.Dir))
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// unmountUnder detaches every mount at or below dir, the deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		// The mount point is the fifth field (proc(5)); spaces in it are escaped.
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}

// nodeIP is the node's address of its pods' family.
func (n *Node) nodeIP() netip.Addr {
	if n.cfg.PodSubnet.Addr().Is6() {
		return n.cfg.Host.IPv6
	}
	return n.cfg.Host.IPv4
}
