package conditions

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/announcer"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/ccm/contest"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/pick"
)

// fakeSource is the announcer as the test decides it.
type fakeSource struct {
	mu        sync.Mutex
	decided   map[string]announcer.Announcement
	listeners []func([]string)
}

func (s *fakeSource) Announcement(service string) (announcer.Announcement, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.decided[service]
	return a, ok
}

func (s *fakeSource) OnAnnouncement(f func([]string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
}

// set decides a Service and tells the listeners.
func (s *fakeSource) set(service string, a announcer.Announcement) {
	s.mu.Lock()
	if s.decided == nil {
		s.decided = map[string]announcer.Announcement{}
	}
	s.decided[service] = a
	listeners := s.listeners
	s.mu.Unlock()
	for _, f := range listeners {
		f([]string{service})
	}
}

type testController struct {
	*Controller
	client   *fake.Clientset
	source   *fakeSource
	recorder *record.FakeRecorder
}

func newTestController(t *testing.T, objs ...runtime.Object) *testController {
	t.Helper()
	client := fake.NewClientset(objs...)
	// The fake clientset keeps no resourceVersion: the cache numbers the versions it
	// sees, as the API server would, for the controller to tell a stale cache.
	var version atomic.Int64
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(func(obj any) (any, error) {
		if svc, ok := obj.(*v1.Service); ok {
			svc.ResourceVersion = strconv.FormatInt(version.Add(1), 10)
		}
		return obj, nil
	}))
	source := &fakeSource{}
	recorder := record.NewFakeRecorder(100)
	c := New(factory, client, recorder, source)
	t.Cleanup(c.queue.ShutDown)
	factory.Start(t.Context().Done())
	factory.WaitForCacheSync(t.Context().Done())
	return &testController{Controller: c, client: client, source: source, recorder: recorder}
}

// service returns the Service as the API has it.
func (tc *testController) service(t *testing.T, name string) *v1.Service {
	t.Helper()
	svc, err := tc.client.CoreV1().Services("ns").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// settle waits until the cache holds the Service as the API has it.
func (tc *testController) settle(t *testing.T, name string) {
	t.Helper()
	want := tc.service(t, name)
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := tc.services.Services("ns").Get(name)
		return err == nil && apiequality.Semantic.DeepEqual(got.Spec, want.Spec) && apiequality.Semantic.DeepEqual(got.Status, want.Status), nil
	})
	if err != nil {
		t.Fatalf("the cache did not see Service %s as the API has it: %v", name, err)
	}
}

// syncApplies syncs the Service and returns how many applies it sent.
func (tc *testController) syncApplies(t *testing.T, name string) int {
	t.Helper()
	before := tc.applies()
	if err := tc.sync(t.Context(), "ns/"+name); err != nil {
		t.Fatal(err)
	}
	return tc.applies() - before
}

// applies counts the requests that wrote.
func (tc *testController) applies() int {
	n := 0
	for _, a := range tc.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			n++
		}
	}
	return n
}

// updateStatus writes the Service's status as another writer would, with an update.
func (tc *testController) updateStatus(t *testing.T, name string, change func(*v1.Service)) {
	t.Helper()
	svc := tc.service(t, name)
	change(svc)
	if _, err := tc.client.CoreV1().Services("ns").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	tc.settle(t, name)
}

func (tc *testController) condition(t *testing.T, name, typ string) *metav1.Condition {
	t.Helper()
	return meta.FindStatusCondition(tc.service(t, name).Status.Conditions, typ)
}

var foreign = metav1.Condition{Type: "example.com/Healthy", Status: metav1.ConditionTrue, Reason: "Fine", Message: "someone else's", LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}

// TestLifecycle takes a Service from no address to served, by hand edits and out of the
// ccm's hands, and counts the writes: one per change, none in steady state, none before
// the cache sees the last one; someone else's condition is kept throughout.
func TestLifecycle(t *testing.T) {
	svc := lbService("web")
	svc.Status.Conditions = []metav1.Condition{foreign}
	tc := newTestController(t, svc)
	step := func(what string, wantApplies int) {
		t.Helper()
		if n := tc.syncApplies(t, "web"); n != wantApplies {
			t.Fatalf("%s: %d applies, want %d: %v", what, n, wantApplies, tc.client.Actions())
		}
		if wantApplies > 0 {
			// The cache has not seen the apply yet: a sync now must not send it again.
			if n := tc.syncApplies(t, "web"); n != 0 {
				t.Fatalf("%s, before the cache saw the apply: %d more applies", what, n)
			}
			tc.settle(t, "web")
		}
		if n := tc.syncApplies(t, "web"); n != 0 {
			t.Fatalf("%s, synced again: %d applies, want none", what, n)
		}
		if c := tc.condition(t, "web", foreign.Type); c == nil || c.Message != foreign.Message {
			t.Fatalf("%s: the foreign condition is %+v, want it kept", what, c)
		}
	}

	step("no address", 1)
	if c := tc.condition(t, "web", TypeProvisioning); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != svc.Generation {
		t.Fatalf("no address: LoadBalancerProvisioning %+v, want True at generation %d", c, svc.Generation)
	}
	provisioningSince := tc.condition(t, "web", TypeServing).LastTransitionTime

	// An address, not decided yet: nothing to say.
	tc.updateStatus(t, "web", func(s *v1.Service) {
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	})
	step("address, no decision", 0)
	tc.source.set("ns/web", announcer.Announcement{Reason: pick.ReasonNoLocalEndpoints, Told: "externalTrafficPolicy is Local and no eligible node has a ready endpoint of ns/web"})
	step("no local endpoint", 1)
	if c := tc.condition(t, "web", TypeDegraded); c == nil || c.Reason != ReasonNoLocalEndpoints {
		t.Fatalf("no local endpoint: LoadBalancerDegraded %+v", c)
	}
	if c := tc.condition(t, "web", TypeServing); c.Status != metav1.ConditionFalse || !c.LastTransitionTime.Equal(&provisioningSince) {
		t.Errorf("no local endpoint: LoadBalancerServing %+v, want False since %v: still not serving, no transition", c, provisioningSince)
	}

	tc.source.set("ns/web", announcer.Announcement{Node: "node-a", Reason: pick.ReasonEndpoints})
	step("announced", 1)
	if c := tc.condition(t, "web", TypeServing); c.Status != metav1.ConditionTrue || c.Message != "node-a announces 198.51.100.1" {
		t.Errorf("announced: LoadBalancerServing %+v", c)
	}
	if c := tc.condition(t, "web", TypeDegraded); c != nil {
		t.Errorf("announced: LoadBalancerDegraded %+v, want none", c)
	}

	// Someone sets LoadBalancerServing False by hand: it is put back.
	tc.updateStatus(t, "web", func(s *v1.Service) {
		meta.FindStatusCondition(s.Status.Conditions, TypeServing).Status = metav1.ConditionFalse
	})
	step("edited by hand", 1)
	if c := tc.condition(t, "web", TypeServing); c.Status != metav1.ConditionTrue {
		t.Errorf("edited by hand: LoadBalancerServing %+v, want True again", c)
	}

	// Not a load balancer any more: the ccm's conditions go, the other stays.
	tc.updateStatus(t, "web", func(s *v1.Service) { s.Status.LoadBalancer = v1.LoadBalancerStatus{} })
	svc = tc.service(t, "web")
	svc.Spec.Type = v1.ServiceTypeClusterIP
	if _, err := tc.client.CoreV1().Services("ns").Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.settle(t, "web")
	step("ClusterIP", 1)
	if got := ours(tc.service(t, "web").Status.Conditions); len(got) != 0 {
		t.Errorf("ClusterIP: conditions %s left", summary(got))
	}
}

// TestOthersConditionsOfOurTypes checks that a Service of another load balancer keeps
// the conditions of our types its own controller wrote, and costs at most one request.
func TestOthersConditionsOfOurTypes(t *testing.T) {
	svc := lbService("other", "198.51.100.1")
	svc.Spec.LoadBalancerClass = ptr.To("example.com/other")
	tc := newTestController(t, svc)
	theirs := metav1.Condition{Type: TypeServing, Status: metav1.ConditionTrue, Reason: "Serving", Message: "theirs", LastTransitionTime: metav1.NewTime(time.Now())}
	tc.updateStatus(t, "other", func(s *v1.Service) { s.Status.Conditions = []metav1.Condition{theirs} })
	total := 0
	for range 3 {
		total += tc.syncApplies(t, "other")
		tc.settle(t, "other")
	}
	if total > 1 {
		t.Errorf("%d applies for a Service of another class, want at most one", total)
	}
	if c := tc.condition(t, "other", TypeServing); c == nil || c.Message != "theirs" {
		t.Errorf("the other controller's LoadBalancerServing is %+v, want it kept", c)
	}
}

// TestContestedConditions has another writer change the conditions back after every
// apply, for 9 minutes: the controller backs off and gives up with one StatusContested
// event, rather than write as often as the other writer does.
func TestContestedConditions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := newTestController(t, lbService("web"))
		applies := 0
		for end := time.Now().Add(9 * time.Minute); time.Now().Before(end); {
			if tc.syncApplies(t, "web") == 0 {
				time.Sleep(time.Second) // waiting, as the queue would: check again later
				continue
			}
			applies++
			tc.settle(t, "web")
			tc.updateStatus(t, "web", func(s *v1.Service) {
				meta.FindStatusCondition(s.Status.Conditions, TypeProvisioning).Message = "mine"
			})
		}
		contested := 0
		for len(tc.recorder.Events) > 0 {
			if e := <-tc.recorder.Events; strings.Contains(e, "StatusContested") {
				contested++
				if !strings.Contains(e, "ns/web") {
					t.Errorf("event %q does not name the Service", e)
				}
			}
		}
		t.Logf("in 9 minutes of contested conditions: %d applies, %d StatusContested events", applies, contested)
		if applies != 1+contest.MaxRewrites || contested != 1 {
			t.Errorf("in 9 minutes of contested conditions: %d applies and %d StatusContested events, want %d and 1", applies, contested, 1+contest.MaxRewrites)
		}
		// Something new to say ends the contest: it is said at once.
		tc.updateStatus(t, "web", func(s *v1.Service) {
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
		})
		tc.source.set("ns/web", announcer.Announcement{Node: "node-a"})
		if n := tc.syncApplies(t, "web"); n != 1 {
			t.Errorf("announced after the contest gave up: %d applies, want 1", n)
		}
	})
}

// TestAnnouncementsQueue checks that the announcer's word queues the Services it names.
func TestAnnouncementsQueue(t *testing.T) {
	tc := newTestController(t)
	for tc.queue.Len() > 0 {
		k, _ := tc.queue.Get()
		tc.queue.Done(k)
	}
	tc.source.set("ns/web", announcer.Announcement{Node: "node-a"})
	if tc.queue.Len() != 1 {
		t.Fatalf("queue holds %d keys after an announcement, want ns/web", tc.queue.Len())
	}
	if k, _ := tc.queue.Get(); k != "ns/web" {
		t.Errorf("queued %q, want ns/web", k)
	}
}
