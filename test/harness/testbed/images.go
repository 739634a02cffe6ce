package testbed

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/podman"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// Program is one of the project's two programs.
type Program string

const (
	// Agent is baremetal-agent.
	Agent Program = "agent"
	// CCM is baremetal-ccm.
	CCM Program = "ccm"
)

// Images runs the programs from container images instead of from their binaries, each
// with the securityContext and grace period of its container in the manifests.
type Images struct {
	Podman *podman.Runtime
	// Image is the image each program runs from; SetImage changes it for the next start.
	Image map[Program]string
	// Security is the securityContext of each program's container.
	Security map[Program]*corev1.SecurityContext
	// Grace is the terminationGracePeriodSeconds of each program's Pod.
	Grace map[Program]time.Duration
}

// SetImage has the programs started from now on run from image: an upgrade, one
// program at a time.
func (c *Cluster) SetImage(p Program, image string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.images.Image[p] = image
}

// ContainerName is the name of the container that runs prog on h.
func ContainerName(h *netns.Host, prog Program) string {
	return podman.NamePrefix + strings.TrimPrefix(h.Name, "bmt-") + "-" + string(prog)
}

// start runs program prog on h with args, under name for logs: its binary, or its image
// with files mounted.
func (c *Cluster) start(h *netns.Host, name string, prog Program, binary string, args []string, files ...string) (*process.Process, error) {
	c.mu.Lock()
	images := c.images
	var image string
	var security *corev1.SecurityContext
	var grace time.Duration
	if images != nil {
		image, security, grace = images.Image[prog], images.Security[prog], images.Grace[prog]
	}
	c.mu.Unlock()
	cmd := h.Command(context.Background(), binary, args...)
	var container string
	if images != nil {
		container = ContainerName(h, prog)
		var err error
		cmd, err = images.Podman.Command(context.Background(), podman.Container{
			Name: container, Image: image, Netns: h.Path(), Files: files,
			Args: args, Security: security, StopGrace: grace,
		})
		if err != nil {
			return nil, err
		}
		name += " (" + image + ")"
	}
	p, err := process.StartCmd(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes = append(c.processes, p)
	if container != "" {
		// podman killed leaves its container running: remove it by name.
		c.closers = append(c.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return images.Podman.Remove(ctx, container)
		})
	}
	return p, nil
}
