package servicewatch

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// watchHealth records since when the Service watch has been broken.
//
// The informer's watch error handler alone cannot say it: the reflector calls it only
// when a list fails or a watch cannot be started for a reason it does not retry itself,
// never for "connection refused" (an API server that is down), which it retries quietly
// from the last resourceVersion, nor when the watch works again. So every list and watch
// request of the informer reports here how it went: a failure breaks the watch, unless it
// was broken already; a success, which is a list the API server answered or a watch it
// accepted, mends it. That holds on a quiet cluster too, where no event would say the
// watch is back: the reflector lists or watches again as soon as its backoff allows.
//
// A watch stream that ends breaks it too, and so does a watch request begun, until a new
// watch is accepted: the API server ends a stream when it stops, and the request for the
// next one may then take seconds to fail, or never does, behind a proxy or load balancer
// that accepts the connection for an API server that is gone (client-go retries such a
// request for up to 10 s). A stream the API server ends at its timeout is followed by a
// new one within milliseconds, and a list by a watch as soon.
type watchHealth struct {
	now func() time.Time
	// changed, if set, is called whenever the watch breaks or mends, without the lock.
	changed func()

	mu      sync.Mutex
	since   time.Time // zero while the watch works
	lastErr error
}

// errWatchEnded is the cause of a break that a stream's end began.
var errWatchEnded = errors.New("the watch stream ended, and no new one was accepted yet")

// endedQuietly is how long a break that a stream's end began may last and be logged
// only at V(2): the API server ends every stream at its timeout, and the reflector
// starts the next at once.
const endedQuietly = time.Second

// observe records the outcome of one list or watch request.
func (h *watchHealth) observe(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the informer is stopping: no verdict on the API server
	}
	h.mu.Lock()
	was := h.since.IsZero()
	defer h.unlockNotify(was)
	switch {
	case err != nil && (h.since.IsZero() || h.lastErr == errWatchEnded):
		if h.since.IsZero() {
			h.since = h.now()
		}
		h.lastErr = err
		klog.InfoS("Service watch broken; announcing only what the ccm confirms while one is heard, else what the cache holds", "err", err, "since", h.since)
	case err != nil:
		h.lastErr = err
	case !h.since.IsZero():
		brokenFor := h.now().Sub(h.since)
		logger := klog.Background()
		if h.lastErr == errWatchEnded && brokenFor < endedQuietly {
			logger = logger.V(2)
		}
		logger.Info("Service watch works again", "brokenFor", brokenFor.Round(time.Millisecond), "lastErr", h.lastErr)
		h.since, h.lastErr = time.Time{}, nil
	}
}

// ended records that no watch stream runs: one ended without the informer stopping it,
// or a new one is being asked for.
func (h *watchHealth) ended(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	h.mu.Lock()
	defer h.unlockNotify(h.since.IsZero())
	if h.since.IsZero() {
		h.since, h.lastErr = h.now(), errWatchEnded
		klog.V(2).InfoS("No Service watch stream runs; taken for broken until one is accepted")
	}
}

// unlockNotify lets go of the lock, and calls changed if the watch broke or mended since
// it was taken, when working said whether the watch worked.
func (h *watchHealth) unlockNotify(working bool) {
	flipped := working != h.since.IsZero()
	h.mu.Unlock()
	if flipped && h.changed != nil {
		h.changed()
	}
}

// followed is a watch whose end, unless the informer stopped it, breaks the watch.
type followed struct {
	watch.Interface
	out      chan watch.Event
	done     chan struct{}
	stopOnce sync.Once
}

// follow returns w, its end reported to h.
func (h *watchHealth) follow(ctx context.Context, w watch.Interface) watch.Interface {
	f := &followed{Interface: w, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(f.out)
		for ev := range w.ResultChan() {
			select {
			case f.out <- ev:
			case <-f.done: // nobody reads any more: drop the rest until w closes
			}
		}
		select {
		case <-f.done:
		default:
			h.ended(ctx)
		}
	}()
	return f
}

// ResultChan returns the events of the watch.
func (f *followed) ResultChan() <-chan watch.Event { return f.out }

// Stop stops the watch: its end is then the informer's doing.
func (f *followed) Stop() {
	f.stopOnce.Do(func() { close(f.done) })
	f.Interface.Stop()
}

// broken returns since when the watch has been broken, and whether it is.
func (h *watchHealth) broken() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, !h.since.IsZero()
}

// newInformer is a cache.SharedIndexInformer of every Service, as the informer factory
// makes it, whose requests h observes. It is meant for factory.InformerFor.
// loadBalancers selects the Services of type LoadBalancer, the only ones an agent
// announces: in a big cluster most Services are of other types, and caching them, even cut
// down, cost as much memory as the LoadBalancer ones (4.2 MiB per 1,000 either way). A
// Service whose type changes away from LoadBalancer leaves the selection, and the watch
// reports it deleted, so its addresses are withdrawn as a deleted Service's are.
var loadBalancers = fields.OneTermEqualSelector("spec.type", string(v1.ServiceTypeLoadBalancer)).String()

func (h *watchHealth) newInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	services := client.CoreV1().Services(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = loadBalancers
			l, err := services.List(ctx, opts)
			h.observe(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = loadBalancers
			// No stream runs until this one is accepted: the request may hang for seconds.
			h.ended(ctx)
			w, err := services.Watch(ctx, opts)
			h.observe(ctx, err)
			if err != nil {
				return nil, err
			}
			return h.follow(ctx, w), nil
		},
	}
	informer := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &v1.Service{},
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	// Also a failure the requests do not show, such as a list the informer cannot use.
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if !errors.Is(err, context.Canceled) {
			h.observe(ctx, err)
		}
	})
	return informer
}

// WatchBroken returns since when the watch of the Services has been failing, and whether
// it is now. While it is, the agent announces only what the ccm's duty confirms, or, with
// no ccm heard, what its cache last held.
func (w *Watcher) WatchBroken() (since time.Time, broken bool) { return w.health.broken() }
