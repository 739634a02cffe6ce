package annotation

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReadNode checks what a Node says of planned maintenance: the drain annotation, strict
// (a value other than true or false is refused, naming key and value, and drains
// nothing), cordoning only with drainOnCordon and overridden by an explicit "false", and
// the out-of-service taint with any effect.
func TestReadNode(t *testing.T) {
	node := func(drain *string, cordoned bool, taints ...v1.Taint) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: map[string]string{}}}
		if drain != nil {
			n.Annotations[Drain] = *drain
		}
		n.Spec.Unschedulable = cordoned
		n.Spec.Taints = taints
		return n
	}
	str := func(s string) *string { return &s }
	oos := func(effect v1.TaintEffect) v1.Taint {
		return v1.Taint{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: effect}
	}
	for _, tc := range []struct {
		name          string
		node          *v1.Node
		drainOnCordon bool
		drained       string // "" for not drained
		outOfService  bool
		err           string // part of the error; "" for none
	}{
		{"nothing", node(nil, false), false, "", false, ""},
		{"drain true", node(str("true"), false), false, "by the annotation lb.baremetal.io/drain", false, ""},
		{"drain false", node(str("false"), false), false, "", false, ""},
		{"drain yes is refused", node(str("yes"), false), false, "", false, `lb.baremetal.io/drain="yes": want "true" or "false"`},
		{"drain True is refused", node(str("True"), false), false, "", false, `lb.baremetal.io/drain="True"`},
		{"drain empty is refused", node(str(""), false), false, "", false, `lb.baremetal.io/drain="": want`},
		{"drain too long is refused", node(str(strings.Repeat("t", MaxValueBytes+1)), false), false, "", false, "more than the limit"},
		{"cordoned, option off", node(nil, true), false, "", false, ""},
		{"cordoned, option on", node(nil, true), true, "as it is cordoned (spec.unschedulable) and maintenance.drainOnCordon is on", false, ""},
		{"cordoned, option on, drain false keeps it", node(str("false"), true), true, "", false, ""},
		{"cordoned, option on, bad drain value: the cordon decides", node(str("no"), true), true, "as it is cordoned (spec.unschedulable) and maintenance.drainOnCordon is on", false, `"no"`},
		{"option on, not cordoned", node(nil, false), true, "", false, ""},
		{"out of service, NoExecute", node(nil, false, oos(v1.TaintEffectNoExecute)), false, "", true, ""},
		{"out of service, NoSchedule", node(nil, false, oos(v1.TaintEffectNoSchedule)), false, "", true, ""},
		{"another taint", node(nil, false, v1.Taint{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}), false, "", false, ""},
		{"drained and out of service", node(str("true"), false, oos(v1.TaintEffectNoExecute)), false, "by the annotation lb.baremetal.io/drain", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ReadNode(tc.node, tc.drainOnCordon)
			if m.Drained != tc.drained || m.OutOfService != tc.outOfService {
				t.Errorf("ReadNode = %+v, want drained %q, out of service %v", m, tc.drained, tc.outOfService)
			}
			var fe *FieldError
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			case tc.err != "" && (!errors.As(err, &fe) || fe.Field != Drain):
				t.Errorf("error %v, want a FieldError of %s", err, Drain)
			}
		})
	}
}
