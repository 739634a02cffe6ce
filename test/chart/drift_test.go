package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// object is a rendered object as plain JSON values, so that kustomize's and helm's
// renderings compare alike whatever number types their decoders chose.
type object = map[string]any

// allowance is a difference between the chart's default rendering and manifests/ that is
// meant. Its normalize takes the difference out of both renderings; it reports whether it
// changed anything, so that an allowance no longer needed fails the test too.
type allowance struct {
	what, why string
	normalize func(kustomize, chart map[string]object) (bool, error)
}

// allowances are every difference the chart may have from manifests/. Everything else of
// every object is compared: kinds, names, namespaces, labels, selectors, RBAC rules,
// ServiceAccounts, containers (args, command, env, ports, probes, resources,
// securityContext, volumeMounts), volumes, tolerations, priority classes, hostNetwork.
var allowances = []allowance{
	{
		what: "the Namespace baremetal-system, only in manifests/",
		why: "Helm creates the release's namespace (helm install --create-namespace); a chart that owned it " +
			"would delete it on uninstall with all it holds, the probe key Secret the operator made there too",
		normalize: func(kustomize, _ map[string]object) (bool, error) {
			_, ok := kustomize["Namespace//"+namespace]
			delete(kustomize, "Namespace//"+namespace)
			return ok, nil
		},
	},
	{
		what: "the hash suffix of the ConfigMap cloud-config's name in manifests/",
		why: "kustomize's configMapGenerator names it after its content, so that an edit makes a new ConfigMap " +
			"and restarts both programs; the chart updates one ConfigMap in place, which both reload without a restart",
		normalize: func(kustomize, _ map[string]object) (bool, error) {
			changed := false
			for key, o := range maps.Clone(kustomize) {
				name, _ := nested(o, "metadata", "name").(string)
				if kind(o) != "ConfigMap" || !strings.HasPrefix(name, "cloud-config-") {
					continue
				}
				meta(o)["name"] = "cloud-config"
				delete(kustomize, key)
				kustomize[keyOf(o)] = o
				for _, w := range kustomize {
					for _, v := range list(nested(w, "spec", "template", "spec", "volumes")) {
						if cm, ok := v.(object)["configMap"].(object); ok && cm["name"] == name {
							cm["name"] = "cloud-config"
						}
					}
				}
				changed = true
			}
			return changed, nil
		},
	},
	{
		what: "the cloud-config's text",
		why: "manifests/base/cloud-config.yaml has comments, which the chart's values cannot carry: " +
			"the files are compared as YAML documents",
		normalize: func(kustomize, chart map[string]object) (bool, error) {
			inK, err := parseCloudConfig(kustomize)
			if err != nil {
				return false, fmt.Errorf("manifests/: %w", err)
			}
			inC, err := parseCloudConfig(chart)
			if err != nil {
				return false, fmt.Errorf("the chart: %w", err)
			}
			return inK && inC, nil
		},
	},
	{
		what: "Helm's labels on each object: helm.sh/chart, app.kubernetes.io/managed-by, app.kubernetes.io/instance, app.kubernetes.io/version",
		why: "Helm's bookkeeping of the release and its version; selectors and pod templates carry none of them " +
			"and are compared as they are",
		normalize: func(_, chart map[string]object) (bool, error) {
			changed := false
			for _, o := range chart {
				labels, _ := meta(o)["labels"].(object)
				for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"} {
					if _, ok := labels[l]; ok {
						delete(labels, l)
						changed = true
					}
				}
			}
			return changed, nil
		},
	},
	{
		what: "the images' tags",
		why: "manifests/base runs :latest and an overlay sets a release's (manifests/example); the chart runs its " +
			"appVersion. The repositories are compared",
		normalize: func(kustomize, chart map[string]object) (bool, error) {
			return eachContainer(kustomize, stripTag) && eachContainer(chart, stripTag), nil
		},
	},
	{
		what: "imagePullPolicy, set only by the chart",
		why: "manifests/base leaves it to the API server's default, which follows its tag (Always for :latest); " +
			"the chart's images have a release's tag and a value to set the policy",
		normalize: func(_, chart map[string]object) (bool, error) {
			return eachContainer(chart, func(c object) bool {
				_, ok := c["imagePullPolicy"]
				delete(c, "imagePullPolicy")
				return ok
			}), nil
		},
	},
}

// TestDefaultsMatchManifests renders manifests/ with kustomize and the chart with its
// default values, and fails on any difference but the allowances.
func TestDefaultsMatchManifests(t *testing.T) {
	chartObjs := renderChart(t)
	manifests, err := render.ManifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	kustomizeObjs, err := render.Render(manifests)
	if err != nil {
		t.Fatal(err)
	}
	kustomize, chart := plain(t, kustomizeObjs), plain(t, chartObjs)
	for _, a := range allowances {
		changed, err := a.normalize(kustomize, chart)
		if err != nil {
			t.Fatalf("allowance %q: %v", a.what, err)
		}
		if !changed {
			t.Errorf("allowance %q changed nothing: the renderings no longer differ there, so remove it", a.what)
		}
	}
	for _, diff := range compare(kustomize, chart) {
		t.Error(diff)
	}
	if t.Failed() {
		t.Log("the allowed differences are:")
		for _, a := range allowances {
			t.Logf("  %s: %s", a.what, a.why)
		}
	}
}

// compare returns every difference between the two sets of objects, one line each: the
// object, the field's path and both values.
func compare(kustomize, chart map[string]object) []string {
	var diffs []string
	for _, key := range sortedKeys(kustomize, chart) {
		k, inK := kustomize[key]
		c, inC := chart[key]
		switch {
		case !inC:
			diffs = append(diffs, fmt.Sprintf("%s: in manifests/, not rendered by the chart", key))
			continue
		case !inK:
			diffs = append(diffs, fmt.Sprintf("%s: rendered by the chart, not in manifests/", key))
			continue
		}
		kf, cf := map[string]any{}, map[string]any{}
		flatten("", k, kf)
		flatten("", c, cf)
		for _, p := range sortedKeys(kf, cf) {
			kv, inK := kf[p]
			cv, inC := cf[p]
			switch {
			case !inC:
				diffs = append(diffs, fmt.Sprintf("%s: %s: manifests/ has %s, the chart nothing", key, p, show(kv)))
			case !inK:
				diffs = append(diffs, fmt.Sprintf("%s: %s: the chart has %s, manifests/ nothing", key, p, show(cv)))
			case !reflect.DeepEqual(kv, cv):
				diffs = append(diffs, fmt.Sprintf("%s: %s: manifests/ has %s, the chart %s", key, p, show(kv), show(cv)))
			}
		}
	}
	return diffs
}

// sortedKeys returns the keys of a and b, sorted, each once.
func sortedKeys[V any](a, b map[string]V) []string {
	keys := slices.Concat(slices.Collect(maps.Keys(a)), slices.Collect(maps.Keys(b)))
	slices.Sort(keys)
	return slices.Compact(keys)
}

// flatten records every leaf of v under its path, such as
// spec.template.spec.containers[0].args[2]. Empty maps and lists are leaves, so that one
// side's {} is not the other's nothing.
func flatten(path string, v any, out map[string]any) {
	switch v := v.(type) {
	case object:
		if len(v) == 0 {
			out[path] = v
		}
		for k, e := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		if len(v) == 0 {
			out[path] = v
		}
		for i, e := range v {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	default:
		out[path] = v
	}
}

// plain turns objects into JSON values keyed by kind/namespace/name.
func plain(t *testing.T, objs []*unstructured.Unstructured) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, u := range objs {
		data, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		var o object
		if err := json.Unmarshal(data, &o); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if _, dup := out[keyOf(o)]; dup {
			t.Fatalf("%s rendered twice", keyOf(o))
		}
		out[keyOf(o)] = o
	}
	return out
}

func keyOf(o object) string {
	ns, _ := nested(o, "metadata", "namespace").(string)
	name, _ := nested(o, "metadata", "name").(string)
	return kind(o) + "/" + ns + "/" + name
}

func kind(o object) string { k, _ := o["kind"].(string); return k }

func meta(o object) object { m, _ := o["metadata"].(object); return m }

// nested returns the value at path in o, or nil.
func nested(o object, path ...string) any {
	var v any = o
	for _, p := range path {
		m, ok := v.(object)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// eachContainer calls f on every container of every pod template, and reports whether f
// changed any.
func eachContainer(objs map[string]object, f func(object) bool) bool {
	changed := false
	for _, o := range objs {
		for _, field := range []string{"initContainers", "containers"} {
			for _, c := range list(nested(o, "spec", "template", "spec", field)) {
				if f(c.(object)) {
					changed = true
				}
			}
		}
	}
	return changed
}

// stripTag removes the tag and digest from a container's image.
func stripTag(c object) bool {
	image, _ := c["image"].(string)
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	c["image"] = repo
	return repo != image
}

// parseCloudConfig replaces the text of each cloud-config ConfigMap with the YAML it
// holds, and reports whether there was one.
func parseCloudConfig(objs map[string]object) (bool, error) {
	changed := false
	for key, o := range objs {
		data, _ := o["data"].(object)
		text, ok := data["cloud-config.yaml"].(string)
		if kind(o) != "ConfigMap" || !ok {
			continue
		}
		var doc any
		if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
			return false, fmt.Errorf("%s: cloud-config.yaml: %w", key, err)
		}
		data["cloud-config.yaml"] = doc
		changed = true
	}
	return changed, nil
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
