package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/process"
)

// The tests that need just any control plane share one, which also tests RunTests and
// Shared; the others start their own.
func TestMain(m *testing.M) {
	os.Exit(RunTests(m))
}

func TestStartAndStop(t *testing.T) {
	begin := time.Now()
	cp, err := Start(t.Context())
	if err != nil {
		SkipOrFail(t, err)
	}
	t.Logf("started in %s", time.Since(begin).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.Logs())
		}
		if !stopped {
			_ = cp.Stop()
		}
	})

	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("admin lists namespaces: %v", err)
	}
	review, err := admin.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin reviews itself: %v", err)
	}
	if got := review.Status.UserInfo; got.Username != "admin" || !slices.Contains(got.Groups, "system:masters") {
		t.Errorf("admin authenticates as %q in %v, want admin in system:masters", got.Username, got.Groups)
	}

	pids := []int{cp.etcd.Pid(), cp.apiserver.Pid()}
	begin = time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	t.Logf("stopped in %s", time.Since(begin).Round(time.Millisecond))
	for _, pid := range pids {
		if process.Alive(pid) {
			t.Errorf("process %d still runs after Stop", pid)
		}
	}
	if _, err := os.Stat(cp.dir.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control plane directory still there after Stop: %v", err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestUserConfigGroupsAndRBAC(t *testing.T) {
	cp := Shared(t)
	config, err := cp.UserConfig("jane", "team-a", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	jane := kubernetes.NewForConfigOrDie(config)
	review, err := jane.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("jane reviews herself: %v", err)
	}
	if got := review.Status.UserInfo; got.Username != "jane" || !slices.Contains(got.Groups, "team-a") || !slices.Contains(got.Groups, "team-b") {
		t.Errorf("jane authenticates as %q in %v, want jane in team-a and team-b", got.Username, got.Groups)
	}
	_, err = jane.CoreV1().Services(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("jane lists services without any role: got %v, want Forbidden", err)
	}
}

func TestServiceAccountConfig(t *testing.T) {
	cp := Shared(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())

	if _, err := cp.ServiceAccountConfig(t.Context(), metav1.NamespaceDefault, "missing"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("config for a missing ServiceAccount: got %v, want an error saying it does not exist", err)
	}

	sa, err := admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(t.Context(), &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "robot-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config, err := cp.ServiceAccountConfig(t.Context(), metav1.NamespaceDefault, sa.Name)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(config).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("ServiceAccount reviews itself: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:"+sa.Name; got != want {
		t.Errorf("ServiceAccount authenticates as %q, want %q", got, want)
	}
}

func TestStartReportsAPIServerThatExits(t *testing.T) {
	if _, err := findBinaries(); err != nil {
		SkipOrFail(t, err)
	}
	_, err := Start(t.Context(), WithAPIServerFlag("no-such-flag", "1"))
	if err == nil {
		t.Fatal("Start with an unknown kube-apiserver flag succeeded")
	}
	for _, want := range []string{"kube-apiserver exited before ready", "unknown flag: --no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start error does not say %q:\n%v", want, err)
		}
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv(BinDirEnv, t.TempDir())
	_, err := Start(t.Context())
	if !errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("Start without binaries: got %v, want ErrBinaryNotFound", err)
	}
}

// The children must not outlive a test binary that dies without stopping them. The
// control plane runs in a copy of this test binary, which is then killed. Killing the
// helper's process group does not reach etcd and kube-apiserver, which have groups of
// their own: only the helper's death can.
func TestChildrenDieWithTestBinary(t *testing.T) {
	if _, err := findBinaries(); err != nil {
		SkipOrFail(t, err)
	}
	t.Setenv(helperEnv, "1")
	helper, err := process.Start("helper", os.Args[0], "-test.run=^TestHelperControlPlane$", "-test.timeout=5m")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = helper.Kill()
		if t.Failed() {
			t.Logf("helper output:\n%s", helper.Logs())
		}
	}()

	var etcdPID, apiserverPID int
	var dir string
	deadline := time.Now().Add(2 * defaultStartTimeout)
	for {
		if _, err := fmt.Sscanf(lineWithPrefix(helper.Logs(), "PIDS "), "PIDS %d %d %s", &etcdPID, &apiserverPID, &dir); err == nil {
			break
		}
		select {
		case <-helper.Exited():
			t.Fatalf("helper exited before starting a control plane: %s", exitStatus(helper))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("helper did not start a control plane in time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer os.RemoveAll(dir) // the helper dies before it can

	for _, pid := range []int{etcdPID, apiserverPID} {
		if !process.Alive(pid) {
			t.Fatalf("process %d is not running before the helper is killed", pid)
		}
	}
	if err := helper.Kill(); err != nil {
		t.Fatal(err)
	}

	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range []int{etcdPID, apiserverPID} {
		for process.Alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs 10s after the test binary that started it was killed", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

const helperEnv = "CONTROLPLANE_TEST_HELPER"

// TestHelperControlPlane is not a test: TestChildrenDieWithTestBinary runs it in a
// subprocess, where it starts a control plane, prints what the parent needs to know and
// waits to be killed.
func TestHelperControlPlane(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("runs only as the subprocess of TestChildrenDieWithTestBinary")
	}
	cp, err := Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PIDS %d %d %s\n", cp.etcd.Pid(), cp.apiserver.Pid(), cp.dir.path)
	select {}
}

func lineWithPrefix(s, prefix string) string {
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func TestAbandonedTempDirsAreRemoved(t *testing.T) {
	dir, err := makeLockedTempDir()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dir.remove(); err != nil {
			t.Error(err)
		}
	}()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dir.path, old, old); err != nil {
		t.Fatal(err)
	}

	removeAbandonedTempDirs()
	if _, err := os.Stat(dir.path); err != nil {
		t.Fatalf("the directory of a live control plane was removed: %v", err)
	}

	dir.lock.Close() // as the kernel does when the test binary dies
	removeAbandonedTempDirs()
	if _, err := os.Stat(dir.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an abandoned control plane directory was not removed: %v", err)
	}
}
