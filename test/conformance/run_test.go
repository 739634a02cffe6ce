package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/install"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/kubenodes"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/netns"
)

// ciMissing ends the test for want of something it needs: a skip, or a failure in CI.
var ciMissing = ci.Missing

// specsTimeout bounds the run of the specs: make test's time limit comes first.
const specsTimeout = 60 * time.Minute

// onlyEnv, set to a regular expression, runs only the specs whose text after
// [Feature:LoadBalancer] it matches, as ginkgo's --focus: to run one spec while working on
// it.
const onlyEnv = "BAREMETAL_CONFORMANCE_FOCUS"

// procs is how many specs run at a time.
const procs = 4

// tool returns the path of the tools module's program name, or ends the test without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := controlplane.Binary(name)
	if err != nil {
		ciMissing(t, "%s: run make conformance, which builds it (%v)", name, err)
	}
	return path
}

// TestSpecList checks, with a dry run of e2e.test, that the focus selects exactly the
// specs docs/conformance.md lists, and that the skip leaves out exactly those it says
// are skipped.
func TestSpecList(t *testing.T) {
	specs, err := expected()
	if err != nil {
		t.Fatal(err)
	}
	report := t.TempDir()
	cmd := exec.CommandContext(t.Context(), tool(t, "e2e.test"), "--provider=local", "--ginkgo.dry-run",
		"--ginkgo.focus="+focus, "--ginkgo.skip="+skipRegexp(specs), "--report-dir="+report)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("e2e.test --ginkgo.dry-run: %v\n%s", err, out)
	}
	results, err := readReport(filepath.Join(report, "junit_01.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var focused []string
	for name, r := range results {
		if strings.Contains(name, "[Feature:LoadBalancer]") {
			focused = append(focused, name)
			e, ok := specs[name]
			switch {
			case !ok:
				t.Errorf("e2e.test has the spec %q, which docs/conformance.md does not list", name)
			case e.skip && r.status != "skipped":
				t.Errorf("the skip regexp does not skip %q, which docs/conformance.md says is skipped", name)
			case !e.skip && r.status != "passed":
				t.Errorf("the dry run does not run %q (%s), which docs/conformance.md says passes", name, r.status)
			}
		} else if r.status != "skipped" {
			t.Errorf("the focus selects %q, which is no [Feature:LoadBalancer] spec", name)
		}
	}
	for name := range specs {
		if !slices.Contains(focused, name) {
			t.Errorf("docs/conformance.md lists %q, which e2e.test does not have", name)
		}
	}
}

// TestLoadBalancerSpecs installs the project from its release on two nodes with the real
// kubelet, containerd and kube-proxy, and runs the [Feature:LoadBalancer] specs from the
// client behind the router. Every spec must end as docs/conformance.md says.
func TestLoadBalancerSpecs(t *testing.T) {
	netns.RequireRoot(t)
	vals := env(t, imagesEnv, imageVersionEnv, nodeImagesEnv, conformanceEnv)
	imagesDir, version, nodeImages, conformanceImages := vals[0], vals[1], vals[2], vals[3]
	e2eTest, ginkgo, kubectl := tool(t, "e2e.test"), tool(t, "ginkgo"), tool(t, "kubectl")
	specs, err := expected()
	if err != nil {
		t.Fatal(err)
	}
	only := os.Getenv(onlyEnv)
	if _, err := regexp.Compile(only); err != nil {
		t.Fatalf("%s: %v", onlyEnv, err)
	}
	ctx := t.Context()
	release := filepath.Join(t.TempDir(), version)
	if err := install.WriteRelease(ctx, version, imagesDir, release); err != nil {
		t.Fatal(err)
	}

	network := netns.ForTest(t, 2)
	if err := network.AddRouter(); err != nil {
		t.Fatal(err)
	}
	// The specs exec into pods and read their logs: the API server reaches the kubelets
	// through the network's proxy.
	cp := controlplane.StartForTest(t, append(kubenodes.OptionsForTest(t, network),
		controlplane.WithAPIServerFlag("disable-admission-plugins", ""))...)
	// The network goes before the control plane stops, with the forwarder's connections
	// to the API server, which would otherwise hold up its shutdown.
	t.Cleanup(func() { _ = network.Close() })
	controlplane.ControllerManagerForTest(t, cp, kubenodes.Controllers...)
	controlplane.SchedulerForTest(t, cp)
	nodes := kubenodes.StartForTest(t, cp, network, pauseArchive(nodeImages))
	images, err := install.ReleaseImages(filepath.Join(release, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for archive, ref := range images {
		repo, _, _ := strings.Cut(ref, ":")
		nodes.Import(t, filepath.Join(release, archive), repo+"@"+strings.SplitN(ref, "@", 2)[1])
	}
	nodes.Import(t, filepath.Join(conformanceImages, "agnhost.oci.tar"))
	nodes.Import(t, filepath.Join(conformanceImages, "coredns.oci.tar"))

	// The cluster DNS, then docs/install.md's commands, from the machine the control
	// plane runs on.
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := install.WriteKubeconfig(cp.AdminConfig(), kubeconfig); err != nil {
		t.Fatal(err)
	}
	shell := install.ShellForTest(t, release, kubeconfig, install.EditorForTest(t, cloudConfig))
	dns, err := filepath.Abs(filepath.Join("testdata", "coredns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shell(t, "kubectl apply -f "+dns+"\nkubectl -n kube-system rollout status deployment/coredns --timeout=2m\n")
	blocks, err := install.ReadBlocks()
	if err != nil {
		t.Fatal(err)
	}
	shell(t, blocks.ProbeKey)
	shell(t, blocks.Apply)

	// The specs, from the client behind the router, which reaches the API server at the
	// forwarder on the nodes' segment; several at a time, as most of their time is spent
	// waiting (for pods, for rolling updates, for timeouts that must pass).
	report := t.TempDir()
	runCtx, cancel := context.WithTimeout(ctx, specsTimeout)
	defer cancel()
	cmd := network.RoutedClient.Command(runCtx, ginkgo,
		"--procs="+strconv.Itoa(procs),
		"--focus="+focus+".*"+only,
		"--skip="+skipRegexp(specs),
		"--timeout="+specsTimeout.String(),
		"--no-color",
		"-v",
		e2eTest, "--",
		"--provider=local",
		// Every ginkgo process needs it: only the first counts the nodes itself.
		"--num-nodes="+strconv.Itoa(len(nodes.Nodes)),
		"--kubeconfig="+nodes.Kubeconfig(t, cp.AdminConfig(), "e2e"),
		"--kubectl-path="+kubectl,
		"--report-dir="+report)
	log, err := os.Create(filepath.Join(report, "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	// Gone with the test, should it be killed; Close of the network kills it otherwise.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("e2e.test ran for %s (%v)", time.Since(start).Round(time.Second), runErr)

	results, err := readReport(filepath.Join(report, "junit_01.xml"))
	if err != nil {
		logTail(t, log.Name())
		t.Fatalf("no report of the specs (e2e.test: %v): %v", runErr, err)
	}
	failed := false
	selected := regexp.MustCompile(focus + ".*" + only)
	for name, e := range specs {
		if !selected.MatchString(name) {
			continue
		}
		r, ok := results[name]
		switch {
		case !ok:
			t.Errorf("no result for %q", name)
		case e.skip && r.status != "skipped":
			t.Errorf("%q %s, want skipped (%s)", name, r.status, e.reason)
		case !e.skip && r.status != "passed":
			failed = true
			t.Errorf("%q %s: %s", name, r.status, r.message)
		default:
			t.Logf("%s: %s", r.status, name)
		}
	}
	if failed || t.Failed() {
		logTail(t, log.Name())
	}
}

// logTail logs the last lines of the specs' log at path.
func logTail(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	const max = 400_000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	t.Logf("e2e.test's log (its end):\n%s", data)
}
