package speaker

import (
	"context"
	"time"

	"github.com/vishvananda/netlink"
)

// The backoff of renewing a netlink subscription that closed: a busy node can overflow
// the socket's buffer (ENOBUFS) again at once, and resubscribing in a loop would only add
// to the load.
const (
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 10 * time.Second
	// resubscribeHealthy is how long a subscription must have lasted for its failure to
	// start the backoff over.
	resubscribeHealthy = time.Minute
)

// subscribeFunc subscribes to the kernel's link and address changes until done is
// closed. netlink closes a channel when its subscription fails, after calling onError;
// onError may also be called for errors that close nothing.
type subscribeFunc func(done <-chan struct{}, onError func(error)) (<-chan netlink.LinkUpdate, <-chan netlink.AddrUpdate, error)

// subscribeNetlink is the subscribeFunc of the network namespace the agent runs in.
func subscribeNetlink(done <-chan struct{}, onError func(error)) (<-chan netlink.LinkUpdate, <-chan netlink.AddrUpdate, error) {
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: onError}); err != nil {
		return nil, nil, err
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{ErrorCallback: onError}); err != nil {
		return nil, nil, err
	}
	return links, addrs, nil
}

// subscription is one subscription to link and address changes.
type subscription struct {
	links  <-chan netlink.LinkUpdate
	addrs  <-chan netlink.AddrUpdate
	since  time.Time
	cancel context.CancelFunc
}

// subscribe starts a subscription that lasts until ctx ends or close is called.
func subscribe(ctx context.Context, f subscribeFunc, onError func(error)) (*subscription, error) {
	ctx, cancel := context.WithCancel(ctx)
	links, addrs, err := f(ctx.Done(), onError)
	if err != nil {
		cancel()
		return nil, err
	}
	return &subscription{links: links, addrs: addrs, since: time.Now(), cancel: cancel}, nil
}

// close ends the subscription. netlink's goroutines may be blocked sending to a full
// channel that nobody reads any more: they are read until netlink closes them, so that
// none is left behind.
func (s *subscription) close() {
	s.cancel()
	go func() {
		for range s.links {
		}
	}()
	go func() {
		for range s.addrs {
		}
	}()
}

// backoff is the wait before each attempt to renew a subscription: it doubles from min
// up to max, and starts from min again after a subscription that lasted healthy.
type backoff struct {
	min, max, healthy time.Duration
	next              time.Duration
}

// failed returns how long to wait before the next attempt, for a subscription that
// lasted lived (0 for an attempt that failed).
func (b *backoff) failed(lived time.Duration) time.Duration {
	if b.next == 0 || lived >= b.healthy {
		b.next = b.min
	}
	wait := b.next
	b.next = min(2*b.next, b.max)
	return wait
}
