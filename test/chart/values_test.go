package chart

import (
	"encoding/base64"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// withPublicKey is what probeKey.create needs besides: the ccm's public key, of the test
// key pair in testdata (made with openssl, as docs/install.md says).
var withPublicKey = []string{"--set-file", "verdictKey.public=testdata/verdict.pub"}

// everything turns on every optional part of the chart.
var everything = []string{
	"--set", "serviceMonitor.enabled=true",
	"--set", "prometheusRule.enabled=true",
	"--set", "probeKey.create=true",
	"--set-file", "verdictKey.public=testdata/verdict.pub",
	"--set", "verdictKey.create=true",
	"--set-file", "verdictKey.private=testdata/verdict.key",
	"--set", "ccm.image.digest=sha256:" + strings.Repeat("ab", 32),
	"--set", "ccm.leaderElection.leaseDuration=20s",
}

// TestLint runs `helm lint --strict` on the chart with its defaults and with every
// optional part on.
func TestLint(t *testing.T) {
	dir := chartDir(t)
	for name, args := range map[string][]string{"defaults": nil, "everything": everything} {
		t.Run(name, func(t *testing.T) {
			out, err := render.RunHelm(append([]string{"lint", "--strict", dir, "--namespace", namespace}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// TestValues checks what each value changes in the rendering.
func TestValues(t *testing.T) {
	t.Run("existing ConfigMap", func(t *testing.T) {
		objs := renderChart(t, "--set", "cloudConfig.existingConfigMap=my-pools")
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" {
				t.Errorf("the chart renders ConfigMap %s beside the existing one", o.GetName())
			}
		}
		for _, w := range workloads(t, objs) {
			if got := volumeSource(t, w, "cloud-config", "configMap", "name"); got != "my-pools" {
				t.Errorf("%s mounts ConfigMap %q, want my-pools", w.GetKind(), got)
			}
		}
	})

	t.Run("probe key from a value", func(t *testing.T) {
		const key = "a-probe-key-of-forty-four-letters-and-digits"
		objs := renderChart(t, append(withPublicKey, "--set", "probeKey.create=true", "--set", "probeKey.value="+key, "--set", "probeKey.secretName=my-key")...)
		data, _, _ := unstructured.NestedString(find(t, objs, "Secret", "my-key").Object, "data", "key")
		if got, _ := base64.StdEncoding.DecodeString(data); string(got) != key {
			t.Errorf("the Secret holds %q, want %q", got, key)
		}
		for _, w := range workloads(t, objs) {
			if got := volumeSource(t, w, "probe-key", "secret", "secretName"); got != "my-key" {
				t.Errorf("%s mounts Secret %q, want my-key", w.GetKind(), got)
			}
		}
	})

	t.Run("probe key generated", func(t *testing.T) {
		// Without a cluster to look the Secret up in, every render makes a new key: what a
		// tool that renders with `helm template` would apply (see values.yaml).
		keys := map[string]bool{}
		for range 2 {
			data, _, _ := unstructured.NestedString(find(t, renderChart(t, append(withPublicKey, "--set", "probeKey.create=true")...), "Secret", "baremetal-probe-key").Object, "data", "key")
			key, _ := base64.StdEncoding.DecodeString(data)
			if len(key) < 32 {
				t.Errorf("generated key %q is %d bytes, want at least 32", key, len(key))
			}
			keys[string(key)] = true
		}
		if len(keys) != 2 {
			t.Errorf("two renders generated the same key: %v", keys)
		}
	})

	t.Run("probe key too short", func(t *testing.T) {
		_, err := render.Chart(chartDir(t), namespace, append(withPublicKey, "--set", "probeKey.create=true", "--set", "probeKey.value=short")...)
		if err == nil || !strings.Contains(err.Error(), "want at least 32") {
			t.Errorf("a 5-byte key: got %v, want an error saying at least 32 bytes", err)
		}
	})

	t.Run("verdict keys", func(t *testing.T) {
		objs := renderChart(t, everything...)
		pub, _, _ := unstructured.NestedString(find(t, objs, "Secret", "baremetal-probe-key").Object, "data", "verdict.pub")
		priv, _, _ := unstructured.NestedString(find(t, objs, "Secret", "baremetal-verdict-key").Object, "data", "key")
		for name, tc := range map[string]struct{ data, file string }{"verdict.pub": {pub, "testdata/verdict.pub"}, "the private key": {priv, "testdata/verdict.key"}} {
			want, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := base64.StdEncoding.DecodeString(tc.data); string(got) != string(want) {
				t.Errorf("%s holds %q, want %s's %q", name, got, tc.file, want)
			}
		}
		// Only the ccm mounts the private key: a kubelet may read the Secrets its pods mount.
		for _, w := range workloads(t, objs) {
			volumes, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "volumes")
			var secrets []string
			for _, v := range volumes {
				if s, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
					secrets = append(secrets, s)
				}
			}
			if got, want := slices.Contains(secrets, "baremetal-verdict-key"), w.GetKind() == "Deployment"; got != want {
				t.Errorf("%s mounts the Secrets %v: the private key's is there %v, want %v", w.GetKind(), secrets, got, want)
			}
		}
		for name, args := range map[string][]string{
			"no public key":               {"--set", "probeKey.create=true"},
			"a private key as the public": {"--set", "probeKey.create=true", "--set-file", "verdictKey.public=testdata/verdict.key"},
			"no private key":              {"--set", "verdictKey.create=true"},
			"a public key as the private": {"--set", "verdictKey.create=true", "--set-file", "verdictKey.private=testdata/verdict.pub"},
		} {
			if _, err := render.Chart(chartDir(t), namespace, args...); err == nil || !strings.Contains(err.Error(), "verdictKey.") {
				t.Errorf("%s: got %v, want an error naming the verdictKey value", name, err)
			}
		}
	})

	t.Run("images", func(t *testing.T) {
		digest := "sha256:" + strings.Repeat("cd", 32)
		objs := renderChart(t, "--set", "ccm.image.tag=v9.9.9", "--set", "ccm.image.digest="+digest,
			"--set", "agent.image.repository=registry.example/agent", "--set", "agent.image.pullPolicy=Always")
		ccm := container(t, find(t, objs, "Deployment", "baremetal-ccm"))
		if want := "ghcr.io/cloud-provider-baremetal/baremetal-ccm:v9.9.9@" + digest; ccm["image"] != want {
			t.Errorf("ccm image %v, want %s", ccm["image"], want)
		}
		agent := container(t, find(t, objs, "DaemonSet", "baremetal-agent"))
		if !strings.HasPrefix(agent["image"].(string), "registry.example/agent:v") || agent["imagePullPolicy"] != "Always" {
			t.Errorf("agent image %v (%v), want registry.example/agent at the chart's appVersion, Always", agent["image"], agent["imagePullPolicy"])
		}
	})

	t.Run("leader election", func(t *testing.T) {
		objs := renderChart(t, "--set", "ccm.replicas=3", "--set", "ccm.leaderElection.resourceName=my-lease",
			"--set", "ccm.leaderElection.leaseDuration=30s", "--set", "ccm.leaderElection.renewDeadline=20s", "--set", "ccm.leaderElection.retryPeriod=4s")
		d := find(t, objs, "Deployment", "baremetal-ccm")
		if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
			t.Errorf("replicas %d, want 3", r)
		}
		args := stringList(container(t, d)["args"])
		for _, want := range []string{"--leader-elect=true", "--leader-elect-resource-name=my-lease", "--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s"} {
			if !slices.Contains(args, want) {
				t.Errorf("the ccm's args lack %s: %v", want, args)
			}
		}
		rules, _, _ := unstructured.NestedSlice(find(t, objs, "Role", "baremetal-ccm").Object, "rules")
		var names []string
		for _, r := range rules {
			names = append(names, stringList(r.(map[string]any)["resourceNames"])...)
		}
		if !slices.Equal(names, []string{"my-lease"}) {
			t.Errorf("the Role grants the Leases %v, want [my-lease]", names)
		}

		single := container(t, find(t, renderChart(t, "--set", "ccm.replicas=1", "--set", "ccm.leaderElection.enabled=false"), "Deployment", "baremetal-ccm"))
		for _, a := range stringList(single["args"]) {
			if strings.HasPrefix(a, "--leader-elect") && a != "--leader-elect=false" {
				t.Errorf("without leader election the ccm still gets %s", a)
			}
		}
		_, err := render.Chart(chartDir(t), namespace, "--set", "ccm.leaderElection.enabled=false")
		if err == nil || !strings.Contains(err.Error(), "needs ccm.leaderElection.enabled") {
			t.Errorf("two replicas without leader election: got %v, want an error", err)
		}
	})

	t.Run("scheduling", func(t *testing.T) {
		objs := renderChart(t, "--set", "agent.nodeSelector.lb=internal", "--set", "agent.tolerations=null",
			"--set", "ccm.priorityClassName=my-priority", "--set", "ccm.resources.limits.memory=1Gi")
		ds := find(t, objs, "DaemonSet", "baremetal-agent")
		if sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector"); sel["lb"] != "internal" {
			t.Errorf("agent nodeSelector %v, want lb=internal", sel)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(ds.Object, "spec", "template", "spec", "tolerations"); found {
			t.Error("agent tolerations rendered after they were set to null")
		}
		d := find(t, objs, "Deployment", "baremetal-ccm")
		if p, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "priorityClassName"); p != "my-priority" {
			t.Errorf("ccm priorityClassName %q, want my-priority", p)
		}
		if m, _, _ := unstructured.NestedString(container(t, d), "resources", "limits", "memory"); m != "1Gi" {
			t.Errorf("ccm memory limit %q, want 1Gi", m)
		}
	})

	t.Run("monitoring", func(t *testing.T) {
		objs := renderChart(t, everything...)
		for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
			o := find(t, objs, kind, "cloud-provider-baremetal")
			if o.GetAPIVersion() != "monitoring.coreos.com/v1" {
				t.Errorf("%s is %s, want monitoring.coreos.com/v1", kind, o.GetAPIVersion())
			}
		}
		// The ServiceMonitor finds the pods through these Services: their selectors must
		// be the workloads'.
		for _, pair := range [][2]string{{"baremetal-ccm-metrics", "Deployment/baremetal-ccm"}, {"baremetal-agent-metrics", "DaemonSet/baremetal-agent"}} {
			kind, name, _ := strings.Cut(pair[1], "/")
			sel, _, _ := unstructured.NestedStringMap(find(t, objs, "Service", pair[0]).Object, "spec", "selector")
			want, _, _ := unstructured.NestedStringMap(find(t, objs, kind, name).Object, "spec", "selector", "matchLabels")
			if len(sel) == 0 || !maps.Equal(sel, want) {
				t.Errorf("Service %s selects %v, want the %s's %v", pair[0], sel, pair[1], want)
			}
		}
	})
}

// workloads returns the ccm's Deployment and the agent's DaemonSet.
func workloads(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	return []*unstructured.Unstructured{find(t, objs, "Deployment", "baremetal-ccm"), find(t, objs, "DaemonSet", "baremetal-agent")}
}

// container returns the only container of a workload's pod template.
func container(t *testing.T, w *unstructured.Unstructured) map[string]any {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%s %s has %d containers, want 1", w.GetKind(), w.GetName(), len(containers))
	}
	return containers[0].(map[string]any)
}

// volumeSource returns a field of the pod template's volume called name, such as
// configMap.name.
func volumeSource(t *testing.T, w *unstructured.Unstructured, name string, fields ...string) string {
	t.Helper()
	volumes, _, _ := unstructured.NestedSlice(w.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		if v.(map[string]any)["name"] == name {
			s, _, _ := unstructured.NestedString(v.(map[string]any), fields...)
			return s
		}
	}
	t.Fatalf("%s %s has no volume %s", w.GetKind(), w.GetName(), name)
	return ""
}

func stringList(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}
