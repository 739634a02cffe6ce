package prober

import (
	"net/netip"
	"time"

	"k8s.io/klog/v2"
)

// sendErrorsEvery is the least time between two lines that log probes this host could
// not send.
const sendErrorsEvery = time.Second

// sendErrors logs the agents whose probes this host cannot send, as they begin to fail:
// a firewall on this host, or a route gone, refuses the probes of thousands of agents in
// the same millisecond, and a line for each would bury everything else. The first agent
// is logged at once, the others in one line a second at most, as a count.
type sendErrors struct {
	// last is when the last line was logged; untold counts the agents that began to fail
	// since, and err is the last error of theirs.
	last   time.Time
	untold int
	err    error
}

// began records that a's probes began to fail with err at now, and logs it, or leaves it
// for the next line (flush).
func (l *sendErrors) began(node string, addr netip.AddrPort, err error, now time.Time) {
	if now.Sub(l.last) < sendErrorsEvery {
		l.untold++
		l.err = err
		return
	}
	l.last = now
	klog.ErrorS(err, "Cannot send a probe to an agent; trying again with backoff", "node", node, "address", addr)
}

// flush logs the agents left untold, once a line may be logged again.
func (l *sendErrors) flush(now time.Time) {
	if l.untold == 0 || now.Sub(l.last) < sendErrorsEvery {
		return
	}
	klog.ErrorS(l.err, "Cannot send the probes of more agents; trying again with backoff", "agents", l.untold, "since", l.last)
	l.last, l.untold, l.err = now, 0, nil
}
