// Package controlloop runs a controller's workers the way k8s.io/sample-controller does:
// wait for the caches, then take keys off a named rate-limited queue and sync each, a
// failed sync retried with the queue's backoff. The ccm's controllers share it, so that
// each holds only its own sync.
package controlloop

import (
	"context"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Sync brings the object of key in line; an error has the key retried.
type Sync func(ctx context.Context, key string) error

// Failure says, for the log, what a sync failed at ("Writing the Service's conditions
// failed, will retry") and what its key names ("service").
type Failure struct {
	Message string
	Key     string
}

// Run waits for synced, then runs workers goroutines of Work until ctx ends, and then
// shuts the queue down.
func Run(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string], synced cache.InformerSynced, workers int, sync Sync, failure Failure) {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	if !cache.WaitForNamedCacheSync(name, ctx.Done(), synced) {
		return
	}
	Start(ctx, queue, workers, sync, failure)
	<-ctx.Done()
}

// Start runs workers goroutines of Work until ctx ends, and returns.
func Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], workers int, sync Sync, failure Failure) {
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { Work(ctx, queue, sync, failure) }, time.Second)
	}
}

// Work syncs the keys of queue until it shuts down.
func Work(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], sync Sync, failure Failure) {
	for {
		key, quit := queue.Get()
		if quit {
			return
		}
		if err := sync(ctx, key); err != nil {
			klog.ErrorS(err, failure.Message, failure.Key, key)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}
