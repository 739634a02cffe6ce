package cpu

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// spin is the busy loop: a shell builtin loop, all user time, no system calls, no
// memory, and one process per loop, so that each is killed by its pid and none outlives
// the test binary (process.StartCmd).
const spin = "while :; do :; done"

// Busy is a set of processes that each keep one core busy for as long as they run.
type Busy struct {
	procs []*process.Process
}

// StartBusy starts n busy loops in group g: with g's request at n cores, they stand for
// pods that use all the CPU they asked for. Stop ends them.
func StartBusy(g *Group, n int) (*Busy, error) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		return nil, fmt.Errorf("start busy loops: %w", err)
	}
	b := &Busy{}
	for i := range n {
		p, err := process.Start(fmt.Sprintf("busy loop %d", i+1), sh, "-c", spin)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start busy loops: %w", err), b.Stop())
		}
		b.procs = append(b.procs, p)
		// It runs outside the group for the moment until it is moved in, harmlessly.
		if err := g.Add(p.Pid()); err != nil {
			return nil, errors.Join(fmt.Errorf("start busy loops: %w", err), b.Stop())
		}
	}
	return b, nil
}

// Pids returns the busy loops' process IDs.
func (b *Busy) Pids() []int {
	var pids []int
	for _, p := range b.procs {
		pids = append(pids, p.Pid())
	}
	return pids
}

// Stop kills every busy loop and waits until each has been reaped. Stopping stopped
// loops does nothing.
func (b *Busy) Stop() error {
	var errs []error
	for _, p := range b.procs {
		if err := p.Kill(); err != nil {
			errs = append(errs, fmt.Errorf("stop busy loops: %w", err))
		}
	}
	return errors.Join(errs...)
}
