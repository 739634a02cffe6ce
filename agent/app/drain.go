package app

import (
	"context"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/responder"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/servicewatch"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/speaker"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/probe"
)

// becomeReady makes the responder's replies say ready once the Service cache has synced
// and the speaker has read the links, unless the agent drains by then. It returns
// whether the agent became ready.
func becomeReady(ctx context.Context, rs *responder.Responder, watcher *servicewatch.Watcher, sp *speaker.Speaker) bool {
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return watcher.HasSynced() && sp.Ready(), nil
	})
	if ctx.Err() == nil && rs.SwapState(probe.Starting, probe.Ready) {
		klog.InfoS("Ready: the Service cache has synced and the links are read")
		return true
	}
	return false
}

// drain returns once no Service names this node, the grace period is over, or a second
// signal arrives.
func drain(watcher *servicewatch.Watcher, grace time.Duration, signals <-chan os.Signal) {
	watcher.Drain()
	deadline := time.After(grace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for watcher.Named() > 0 {
		select {
		case <-deadline:
			klog.InfoS("Grace period over; stopping with Services still naming this node", "services", watcher.Named())
			return
		case <-signals:
			return
		case <-tick.C:
		}
	}
	// The addresses moved away, but the new announcers' agents may learn it a little
	// later than this one did: answer a moment longer, so that none goes unanswered.
	select {
	case <-deadline:
	case <-signals:
	case <-time.After(drainLinger):
	}
}

// drainLinger is how long a draining agent keeps answering after no Service names its
// node: several times what a watch event takes to reach every agent on a busy node.
const drainLinger = 500 * time.Millisecond
