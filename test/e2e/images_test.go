package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/podman"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/testbed"
)

// imagesEnv names the directory of the image archives `make images` writes.
const imagesEnv = "BAREMETAL_IMAGES"

// podmanDir is where the tests' podman keeps its images and containers across runs.
var podmanDir = filepath.Join(os.TempDir(), "baremetal-test-podman")

// loadImages loads the archives of both programs, in the directory env names, into the tests' podman and returns the
// testbed's Images, each program with its container's securityContext and its Pod's
// grace period from the manifests. Without the archives it skips, or fails under CI.
func loadImages(t testing.TB, env string) *testbed.Images {
	t.Helper()
	netns.RequireRoot(t)
	dir := os.Getenv(env)
	if dir == "" {
		if ci.Running() {
			t.Fatalf("%s is not set: make test sets it to the directory of the image archives it builds", env)
		}
		t.Skipf("%s is not set: run make images, and the test with %s=<the directory of the archives>", env, env)
	}
	ctx := context.Background()
	rt, err := podman.New(ctx, podmanDir)
	if err != nil {
		t.Fatal(err)
	}
	images := &testbed.Images{Podman: rt, Image: map[testbed.Program]string{}, Security: map[testbed.Program]*corev1.SecurityContext{}, Grace: map[testbed.Program]time.Duration{}}
	for prog, archive := range map[testbed.Program]string{testbed.Agent: "baremetal-agent.oci.tar", testbed.CCM: "baremetal-ccm.oci.tar"} {
		if images.Image[prog], err = rt.Load(ctx, filepath.Join(dir, archive)); err != nil {
			t.Fatal(err)
		}
	}
	pods := manifestPods(t)
	for prog, spec := range pods {
		images.Security[prog] = spec.Containers[0].SecurityContext
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		images.Grace[prog] = time.Duration(grace) * time.Second
	}
	return images
}

// manifestPods returns the Pod templates of the agent's DaemonSet and the ccm's
// Deployment, as the manifests render.
func manifestPods(t testing.TB) map[testbed.Program]corev1.PodSpec {
	t.Helper()
	dir, err := render.ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[testbed.Program]corev1.PodSpec{}
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			pods[testbed.Agent] = ds.Spec.Template.Spec
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			pods[testbed.CCM] = d.Spec.Template.Spec
		}
	}
	if len(pods) != 2 {
		t.Fatalf("the manifests render %d of the DaemonSet and the Deployment", len(pods))
	}
	return pods
}

// TestImages runs the agents and the ccm from the images `make images` built, each with
// its container's securityContext in the manifests (read-only root, every capability
// dropped but the agent's NET_RAW and NET_ADMIN, the ccm as a non-root user), and sees an address
// announced, and failed over when its node dies.
func TestImages(t *testing.T) {
	images := loadImages(t, imagesEnv)
	for prog, want := range map[testbed.Program][]string{testbed.Agent: {"NET_RAW", "NET_ADMIN"}, testbed.CCM: nil} {
		sc := images.Security[prog]
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
			t.Fatalf("the manifests' %s container has no read-only root or drops no capability: %+v", prog, sc)
		}
		var add []string
		for _, c := range sc.Capabilities.Add {
			add = append(add, string(c))
		}
		if !slices.Equal(add, want) {
			t.Fatalf("the manifests' %s container adds %v, want %v", prog, add, want)
		}
	}
	c := newClusterImages(t, controlplane.Shared(t), 3, cloudConfig, images)
	ccm, err := c.StartCCM(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	svc, addrs := c.createLBService(t, "images")
	c.waitSettled(t)
	// What the programs run with, read from the kernel: the user, the capabilities, and
	// the root file system.
	for prog, want := range map[testbed.Program]struct {
		nonRoot bool
		capEff  string
	}{testbed.CCM: {true, "0000000000000000"}, testbed.Agent: {false, "0000000000003000"}} {
		h := c.Net.Bridge
		if prog == testbed.Agent {
			h = c.Net.Nodes[0]
		}
		pid, err := images.Podman.Pid(context.Background(), testbed.ContainerName(h, prog))
		if err != nil {
			t.Fatal(err)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		uid, capEff := procField(status, "Uid"), procField(status, "CapEff")
		if nonRoot := !strings.HasPrefix(uid, "0\t"); nonRoot != want.nonRoot || capEff != want.capEff {
			t.Errorf("%s runs with Uid %q and CapEff %s, want non-root %v and CapEff %s", prog, uid, capEff, want.nonRoot, want.capEff)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !rootReadOnly(string(mounts)) {
			t.Errorf("%s's root file system is writable:\n%s", prog, mounts)
		}
	}
	for _, addr := range addrs {
		t.Run("node death "+family(addr), func(t *testing.T) {
			tr := c.killOwner(t, ccm, svc, addr)
			t.Logf("%s: %s died, %s took over; outage %v", addr, tr.from, tr.to, tr.outage)
			if tr.to == tr.from || tr.to == "" {
				t.Errorf("announcer after %s died: %q", tr.from, tr.to)
			}
			if tr.outage > time.Second {
				t.Errorf("outage %v, want well under a second", tr.outage)
			}
			c.waitSettled(t)
		})
	}
}

// procField returns the value of field in a /proc/<pid>/status.
func procField(status []byte, field string) string {
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// rootReadOnly reports whether the mount at / in a /proc/<pid>/mountinfo is read-only.
func rootReadOnly(mountinfo string) bool {
	for line := range strings.Lines(mountinfo) {
		// ID, parent, major:minor, root, mount point, options, ...
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			return slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	return false
}
