// Package kubeproxy runs the real kube-proxy, which `make tools` builds into
// hack/tools/bin, inside a node's network namespace (package netns), so that tests see a
// Service's traffic handed on to its endpoints as on a Kubernetes node: the rules are
// kube-proxy's own, in nftables (the default here) or iptables.
//
// Each kube-proxy programs only its namespace. What kube-proxy would set outside it is
// turned off in the configuration Start writes: the conntrack settings that are global
// (nf_conntrack_max and the module's hashsize) or that a test has no reason to change.
// Its rules live and die with the namespace.
package kubeproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// Mode is how kube-proxy programs the kernel: the proxy mode of its configuration.
type Mode string

// The modes Start can run kube-proxy in.
const (
	// NFTables has kube-proxy write its rules as nftables tables of its own, with nft(8).
	NFTables Mode = "nftables"
	// IPTables has kube-proxy write iptables chains with iptables-restore(8) and
	// ip6tables-restore(8).
	IPTables Mode = "iptables"
)

// Where kube-proxy serves, on the loopback of its node's namespace, which no other node
// shares: every kube-proxy has the same addresses, as on real nodes.
const (
	// HealthzAddress serves /healthz and /livez.
	HealthzAddress = "127.0.0.1:10256"
	// MetricsAddress serves /metrics.
	MetricsAddress = "127.0.0.1:10249"
)

const (
	// startTimeout bounds how long Start waits for the first sync. kube-proxy needs
	// about a second; the bound only ends a start that will never succeed.
	startTimeout = 60 * time.Second
	// stopGrace bounds a hung shutdown: kube-proxy exits on SIGTERM at once.
	stopGrace = 10 * time.Second
	// logTailLines is how much of the log a start error quotes.
	logTailLines = 30
	// syncMetric is set, per IP family, each time kube-proxy has written its rules.
	syncMetric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
)

// Config says what kube-proxy proxies for, and how.
type Config struct {
	// NodeName is the name of the Node kube-proxy runs on: its hostnameOverride. The
	// Node should exist, with its addresses, before Start: kube-proxy takes its node IPs
	// from it, waits up to 30 s for them otherwise, and exits when they change.
	NodeName string
	// Kubeconfig is the path of a kubeconfig that reaches the API server from inside the
	// namespace, such as one written by install.WriteKubeconfig for a forwarder of
	// netns.Network.Forward, with the credentials of ControlPlane.KubeProxyConfig.
	Kubeconfig string
	// ClusterCIDRs are the cluster's Pod networks. kube-proxy treats traffic from outside
	// them as external (detectLocalMode ClusterCIDR); none leaves all traffic so.
	ClusterCIDRs []netip.Prefix
	// Mode is NFTables when empty.
	Mode Mode
	// Dir is where Start writes kube-proxy's configuration file.
	Dir string
}

// KubeProxy is a kube-proxy running in a node's namespace. Its methods are safe for
// concurrent use.
type KubeProxy struct {
	host     *netns.Host
	p        *process.Process
	config   string // the configuration file
	families []string

	stopOnce sync.Once
	stopErr  error
}

// Start turns on forwarding in h's namespace (netns.Host.EnableForwarding: kube-proxy
// hands traffic on to other nodes, and every Kubernetes node forwards), starts kube-proxy
// there with a configuration file it writes to cfg.Dir, and returns once kube-proxy has
// written its rules for every IP family it serves, and /healthz answers 200. A kube-proxy
// that exits or does not sync within a minute is killed and reported with the end of its
// log. ctx bounds only the start: kube-proxy runs until Stop, or until the namespace is
// deleted. A missing binary gives an error wrapping controlplane.ErrBinaryNotFound.
func Start(ctx context.Context, h *netns.Host, cfg Config) (*KubeProxy, error) {
	if cfg.Mode == "" {
		cfg.Mode = NFTables
	}
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("start kube-proxy: Config.NodeName is empty")
	case cfg.Kubeconfig == "":
		return nil, errors.New("start kube-proxy: Config.Kubeconfig is empty")
	case cfg.Dir == "":
		return nil, errors.New("start kube-proxy: Config.Dir is empty")
	case cfg.Mode != NFTables && cfg.Mode != IPTables:
		return nil, fmt.Errorf("start kube-proxy: mode %q: want %q or %q", cfg.Mode, NFTables, IPTables)
	}
	bin, err := controlplane.Binary("kube-proxy")
	if err != nil {
		return nil, err
	}
	families, err := families(h, cfg.Mode)
	if err != nil {
		return nil, err
	}
	if err := h.EnableForwarding(); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, "kube-proxy-"+h.Label+".yaml")
	if err := writeConfig(path, cfg); err != nil {
		return nil, err
	}

	// Not ctx: it bounds the start, and the command's context would kill kube-proxy
	// when it ends.
	cmd := h.Command(context.Background(), bin, "--config="+path)
	p, err := process.StartCmd("kube-proxy on "+h.Label, cmd)
	if err != nil {
		return nil, err
	}
	k := &KubeProxy{host: h, p: p, config: path, families: families}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := k.waitSynced(ctx); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return k, nil
}

// families returns the IP families kube-proxy serves in h's namespace, as it decides
// them: IPv6 too unless the namespace has it disabled, or iptables mode lacks
// ip6tables.
func families(h *netns.Host, mode Mode) ([]string, error) {
	var disabled []byte
	err := h.Do(func() (err error) {
		// /proc/sys/net is the namespace's of the thread that opens it.
		disabled, err = os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("start kube-proxy: %w", err)
	}
	v6 := err == nil && strings.TrimSpace(string(disabled)) == "0"
	if mode == IPTables {
		if _, err := exec.LookPath("ip6tables"); err != nil {
			v6 = false
		}
	}
	if v6 {
		return []string{"IPv4", "IPv6"}, nil
	}
	return []string{"IPv4"}, nil
}

// writeConfig writes kube-proxy's configuration file: JSON, which is YAML too.
func writeConfig(path string, cfg Config) error {
	cidrs := make([]string, len(cfg.ClusterCIDRs))
	for i, p := range cfg.ClusterCIDRs {
		cidrs[i] = p.Masked().String()
	}
	config := map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"clientConnection": map[string]any{"kubeconfig": cfg.Kubeconfig},
		"hostnameOverride": cfg.NodeName,
		"mode":             string(cfg.Mode),
		"clusterCIDR":      strings.Join(cidrs, ","),
		"detectLocalMode":  "ClusterCIDR",
		// NodePorts, health check node ports included, on the node's addresses of its
		// Node object only: nftables mode's default, and iptables mode's too with
		// this. Otherwise iptables mode accepts them on 127.0.0.1 as well, for which it
		// sets route_localnet in the namespace.
		"nodePortAddresses": []string{"primary"},
		// On the namespace's own loopback: every node has these, and only the test
		// reaches them, from inside.
		"healthzBindAddress": HealthzAddress,
		"metricsBindAddress": MetricsAddress,
		// All namespaces share nf_conntrack_max and the module's hashsize, which
		// maxPerCore 0 leaves alone. The timeouts and tcpBeLiberal are the namespace's
		// own in today's kernels, but they are the machine's settings as far as a test
		// is concerned: 0 (and false) leave each as it is.
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
			"tcpBeLiberal":          false,
			"udpTimeout":            "0s",
			"udpStreamTimeout":      "0s",
		},
		// kube-proxy's default, -999, would make it the last process the kernel kills
		// when memory runs out: a test's kube-proxy is no more precious than the test.
		"oomScoreAdj": 0,
		// Level 2 logs each sync and every Service and endpoint change: what a failed
		// test needs to be understood.
		"logging": map[string]any{"verbosity": 2},
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return fmt.Errorf("start kube-proxy: encode its configuration: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("start kube-proxy: write its configuration: %w", err)
	}
	return nil
}

// waitSynced waits until kube-proxy has synced its rules for every family and /healthz
// passes. /healthz alone says nothing of a sync: it passes from the start, before
// kube-proxy has read a single Service. The sync metric is set only once the rules of
// a family have been written.
func (k *KubeProxy) waitSynced(ctx context.Context) error {
	var lastErr error
	for {
		lastErr = k.checkSynced(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-k.p.Exited():
			return k.startError("exited before its first sync: %s", exitStatus(k.p))
		case <-ctx.Done():
			return k.startError("did not sync: %v (last check: %v)", context.Cause(ctx), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *KubeProxy) checkSynced(ctx context.Context) error {
	synced, err := k.SyncTimes(ctx)
	if err != nil {
		return err
	}
	for _, f := range k.families {
		if synced[f].IsZero() {
			return fmt.Errorf("no sync of the %s rules yet", f)
		}
	}
	code, body, err := k.Healthz(ctx)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/healthz: %d: %s", code, strings.TrimSpace(body))
	}
	return nil
}

func (k *KubeProxy) startError(format string, args ...any) error {
	return fmt.Errorf("kube-proxy on %s %s\n--- last %d lines of its log ---\n%s",
		k.host.Label, fmt.Sprintf(format, args...), logTailLines, k.p.Tail(logTailLines))
}

func exitStatus(p *process.Process) string {
	if err := p.ExitError(); err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// SyncTimes returns when kube-proxy last finished writing its rules, by IP family
// ("IPv4", "IPv6"), as its metrics say. A family it has not synced yet is missing.
func (k *KubeProxy) SyncTimes(ctx context.Context) (map[string]time.Time, error) {
	code, body, err := k.get(ctx, "http://"+MetricsAddress+"/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", code)
	}
	times := map[string]time.Time{}
	scanner := bufio.NewScanner(strings.NewReader(body))
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		// kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7e+09
		rest, ok := strings.CutPrefix(scanner.Text(), syncMetric+`{ip_family="`)
		if !ok {
			continue
		}
		family, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		seconds, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || seconds <= 0 {
			continue
		}
		times[family] = time.Unix(0, int64(seconds*float64(time.Second)))
	}
	return times, scanner.Err()
}

// Healthz asks kube-proxy's /healthz, from inside its namespace, and returns the status
// and body of the answer; the error is for no answer.
func (k *KubeProxy) Healthz(ctx context.Context) (int, string, error) {
	return k.get(ctx, "http://"+HealthzAddress+"/healthz")
}

// get does an HTTP GET of url from inside kube-proxy's namespace.
func (k *KubeProxy) get(ctx context.Context, url string) (int, string, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: k.host.Dial, DisableKeepAlives: true}}
	return install.Get(ctx, client, url)
}

// Stop stops kube-proxy with SIGTERM, or SIGKILL after a grace period. Its rules stay in
// the namespace, as on a node whose kube-proxy stops, until the namespace goes. Stop
// reports a kube-proxy that had exited before or had to be killed, and returns the same
// answer if called again.
func (k *KubeProxy) Stop() error {
	k.stopOnce.Do(func() {
		k.stopErr = k.p.Stop(stopGrace)
	})
	return k.stopErr
}

// Pid returns kube-proxy's process ID: `ip netns exec` runs it in its own place.
func (k *KubeProxy) Pid() int { return k.p.Pid() }

// Logs returns everything kube-proxy has printed so far.
func (k *KubeProxy) Logs() string { return k.p.Logs() }

// ConfigFile returns the path of the configuration file kube-proxy runs with.
func (k *KubeProxy) ConfigFile() string { return k.config }

// StartForTest starts kube-proxy on h for the test, as Start does, with cfg.Dir a
// directory of the test's when empty. A missing binary skips the test, or fails it under
// CI (controlplane.SkipOrFail); any other start error fails it. kube-proxy is stopped
// when the test ends, after its log is logged if the test failed.
func StartForTest(t testing.TB, h *netns.Host, cfg Config) *KubeProxy {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	k, err := Start(t.Context(), h, cfg)
	if err != nil {
		controlplane.SkipOrFail(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of kube-proxy on %s:\n%s", h.Label, k.Logs())
		}
		if err := k.Stop(); err != nil {
			t.Errorf("stop kube-proxy on %s: %v", h.Label, err)
		}
	})
	return k
}
