package announcer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/prober"
)

func TestIsolationEvents(t *testing.T) {
	tc := newTestController(t)
	var lost []string
	for i := range 12 {
		lost = append(lost, fmt.Sprintf("node-%02d", i))
	}
	tc.isolationChanged(prober.Isolation{Isolated: true, Lost: lost, Probed: 13, Window: 42 * time.Millisecond, Since: time.Now()})
	tc.isolationChanged(prober.Isolation{Probed: 13, Lost: []string{"node-03"}})
	var events []string
	for len(tc.recorder.Events) > 0 {
		events = append(events, <-tc.recorder.Events)
	}
	if len(events) != 2*maxIsolationEvents {
		t.Fatalf("%d events, want %d on the start and as many on the end: %q", len(events), 2*maxIsolationEvents, events)
	}
	want := "Warning ProbesLost The ccm lost 12 of 13 agents' probes within 42ms; it suspects its own network and keeps every announcer as it is (this event is on 10 of the 12 Nodes)"
	if events[0] != want {
		t.Errorf("start event\n got %q\nwant %q", events[0], want)
	}
	end := events[maxIsolationEvents]
	if !strings.HasPrefix(end, "Normal ProbesRestored The ccm hears most agents again after ") || !strings.Contains(end, "; 1 still do not answer and fail over as usual (this event is on 10 of the 12 Nodes)") {
		t.Errorf("end event %q", end)
	}
}
