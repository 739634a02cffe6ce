package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

const (
	// endpointSliceController is the name kube-controller-manager knows the EndpointSlice
	// controller by in --controllers, and the name of its health check.
	endpointSliceController = "endpointslice-controller"
	// controllerManagerStopGrace bounds a hung shutdown; kube-controller-manager exits on
	// SIGTERM at once.
	controllerManagerStopGrace = 10 * time.Second
)

// errControlPlaneStopping is the error of StartControllerManager once Stop has begun.
var errControlPlaneStopping = errors.New("start kube-controller-manager: the control plane is stopped")

// ControllerManager is a real kube-controller-manager that runs the controllers it was
// started with: by default only the EndpointSlice controller, so that the EndpointSlices
// of Services with a selector follow their Pods as in a cluster. Tests that have no
// kubelet play its part by writing the Pods' status.
// Its methods are safe for concurrent use.
type ControllerManager struct {
	p        *process.Process
	stopped  atomic.Bool // Stop was called, by the test or by the control plane's Stop
	stopOnce sync.Once
	stopErr  error
}

// StartControllerManager starts kube-controller-manager against c with the named
// controllers (their names in --controllers, such as "deployment-controller"), the
// EndpointSlice controller alone when none is named, and returns once its /healthz passes
// and lists each of them. ctx bounds only the start. It runs until its Stop, or until c stops, whichever comes first.
// A missing binary gives an error wrapping ErrBinaryNotFound.
//
// It authenticates as user system:kube-controller-manager with a client certificate of
// its own, and runs each controller with the credentials of its ServiceAccount in
// kube-system, such as endpointslice-controller (--use-service-account-credentials), so that
// only kube-apiserver's bootstrap RBAC roles apply, as in a kubeadm cluster. Leader
// election is off; it serves /healthz on a free loopback port with a self-signed
// certificate it makes in memory.
func (c *ControlPlane) StartControllerManager(ctx context.Context, controllers ...string) (*ControllerManager, error) {
	if len(controllers) == 0 {
		controllers = []string{endpointSliceController}
	}
	bin, err := Binary("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	stopping := c.stopping
	c.mu.Unlock()
	if stopping {
		return nil, errControlPlaneStopping
	}
	kubeconfig, err := c.componentKubeconfig("system:kube-controller-manager", "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, defaultStartTimeout)
	defer cancel()
	return retryPortTaken(func() (*ControllerManager, error) {
		return c.startControllerManager(ctx, bin, kubeconfig, controllers)
	})
}

func (c *ControlPlane) startControllerManager(ctx context.Context, bin, kubeconfig string, controllers []string) (*ControllerManager, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	p, err := process.Start("kube-controller-manager", bin,
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--use-service-account-credentials=true",
		// Thousands of Services (the failover benchmark's 5,000) get their slices in
		// seconds rather than the minutes of the default 20 requests a second.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--v=2",
	)
	if err != nil {
		return nil, err
	}
	m := &ControllerManager{p: p}
	if err := waitHealthy(ctx, m.p, "https://"+loopbackAddress(port)+"/healthz?verbose", controllers); err != nil {
		_ = p.Kill()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		// Stop has begun and would not see this one: stop it here.
		_ = m.Stop()
		return nil, errControlPlaneStopping
	}
	c.controllerManagers = append(c.controllerManagers, m)
	return m, nil
}

// waitHealthy waits until url, the verbose /healthz of p (kube-controller-manager or
// kube-scheduler), passes with a check of each of checks among those it lists: a
// controller's check is added once the controller is built, so that is when the
// controller manager runs what it should.
func waitHealthy(ctx context.Context, p *process.Process, url string, checks []string) error {
	// The serving certificate is self-signed and made in memory: nothing to check it
	// against. The request carries no credentials; /healthz is open to anyone.
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
	var lastErr error
	for {
		lastErr = checkHealthz(ctx, client, url, checks)
		if lastErr == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return startError(p, "%s exited before healthy: %s", p.Name(), exitStatus(p))
		case <-ctx.Done():
			return startError(p, "%s not healthy: %v (last check: %v)", p.Name(), context.Cause(ctx), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func checkHealthz(ctx context.Context, client *http.Client, url string, checks []string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	for _, check := range checks {
		if want := "[+]" + check + " ok"; !strings.Contains(string(body), want) {
			return fmt.Errorf("/healthz does not list %q yet", want)
		}
	}
	return nil
}

// Stop stops kube-controller-manager. It reports one that had to be killed or had exited
// before, and returns the same answer if called again.
func (m *ControllerManager) Stop() error {
	m.stopped.Store(true)
	m.stopOnce.Do(func() {
		m.stopErr = m.p.Stop(controllerManagerStopGrace)
	})
	return m.stopErr
}

// Logs returns everything kube-controller-manager has printed so far.
func (m *ControllerManager) Logs() string { return m.p.Logs() }

// Pid returns the process ID of kube-controller-manager.
func (m *ControllerManager) Pid() int { return m.p.Pid() }

// KubeProxyConfig returns a new config that authenticates as user system:kube-proxy with
// a client certificate, as kube-proxy does in a kubeadm cluster: kube-apiserver's
// bootstrap ClusterRoleBinding system:node-proxier grants that user what kube-proxy
// reads and writes.
func (c *ControlPlane) KubeProxyConfig() (*rest.Config, error) {
	return c.UserConfig("system:kube-proxy")
}

// writeKubeconfig writes cfg (server, CA and client certificate) as a kubeconfig file.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", filepath.Base(path), err)
	}
	return nil
}

// ControllerManager returns the controller manager that StartControllerManager started on
// c and that still runs, or starts one. Testbeds built one after another on a shared
// control plane use it, so that one EndpointSlice controller serves them all: two would
// both write the slices of every Service.
func (c *ControlPlane) ControllerManager(ctx context.Context) (*ControllerManager, error) {
	c.mu.Lock()
	for _, m := range c.controllerManagers {
		select {
		case <-m.p.Exited():
			continue
		default:
		}
		if !m.stopped.Load() {
			c.mu.Unlock()
			return m, nil
		}
	}
	c.mu.Unlock()
	return c.StartControllerManager(ctx)
}
