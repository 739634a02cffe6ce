package servicewatch

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/agent/wirecheck"
)

// Reasons of the events of the wire check, on the Services of an address this node
// backs.
const (
	// ReasonAddressUnanswered (Warning): the address went unanswered on the wire while its
	// announcer's node answered for its own address.
	ReasonAddressUnanswered = "AddressUnanswered"
	// ReasonAddressAnswered (Normal): it is answered again.
	ReasonAddressAnswered = "AddressAnswered"
)

// AddressUnanswered records a Warning event on the Services of t: this node asked for
// its address as a client does, rounds in a row, and nobody answered, while the
// announcer's node answered for its own address on the same link.
func (w *Watcher) AddressUnanswered(t wirecheck.Target) {
	control := "another address asked for in the same round was answered"
	if t.Control.IsValid() {
		control = t.Announcer + " answered for its own address " + t.Control.String()
	}
	w.eventOn(t.Services, v1.EventTypeWarning, ReasonAddressUnanswered,
		"Node %s asked for %s on %s twice in a row, as a client does, and nobody answered, while %s: %s announces the address, and its agent answers the ccm's probes, but clients get no answer from it. Look in the log of %s's agent, and for what drops ARP or NDP there (a filter, a bond or VLAN that changed)",
		w.node, t.Addr, t.Interface.Name, control, t.Announcer, t.Announcer)
}

// AddressAnswered records a Normal event on the Services of t: its address is answered on
// the wire again.
func (w *Watcher) AddressAnswered(t wirecheck.Target) {
	w.eventOn(t.Services, v1.EventTypeNormal, ReasonAddressAnswered,
		"Node %s's requests for %s on %s are answered again", w.node, t.Addr, t.Interface.Name)
}

// eventOn records an event on each of the Services ("namespace/name") still cached.
func (w *Watcher) eventOn(services []string, kind, reason, format string, args ...any) {
	for _, key := range services {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		svc, err := w.lister.Services(ns).Get(name)
		if err != nil {
			continue
		}
		w.recorder.Eventf(svc, kind, reason, format, args...)
	}
}
