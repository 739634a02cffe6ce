package controlplane

import (
	"context"
	"strconv"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// Scheduler is a real kube-scheduler, which binds Pods to Nodes for the tests that run
// kubelets. Its methods are safe for concurrent use.
type Scheduler struct {
	p *process.Process
}

// StartScheduler starts kube-scheduler against c and returns once its /healthz passes. It
// authenticates as user system:kube-scheduler with a client certificate of its own, so
// that kube-apiserver's bootstrap RBAC roles for it apply, as in a kubeadm cluster.
// Leader election is off; it serves /healthz on a free loopback port. ctx bounds only the
// start. A missing binary gives an error wrapping ErrBinaryNotFound.
func (c *ControlPlane) StartScheduler(ctx context.Context) (*Scheduler, error) {
	bin, err := Binary("kube-scheduler")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.componentKubeconfig("system:kube-scheduler", "kube-scheduler")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, defaultStartTimeout)
	defer cancel()
	return retryPortTaken(func() (*Scheduler, error) { return startScheduler(ctx, bin, kubeconfig) })
}

func startScheduler(ctx context.Context, bin, kubeconfig string) (*Scheduler, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p, err := process.Start("kube-scheduler", bin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--v=1",
	)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, p, "https://"+loopbackAddress(ports[0])+"/healthz?verbose", nil); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return &Scheduler{p: p}, nil
}

// Stop stops kube-scheduler, which exits on SIGTERM at once.
func (s *Scheduler) Stop() error { return s.p.Stop(10 * time.Second) }

// Logs returns everything kube-scheduler has printed so far.
func (s *Scheduler) Logs() string { return s.p.Logs() }
