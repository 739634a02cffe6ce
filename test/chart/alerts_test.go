package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/ci"
	"sigs.k8s.io/yaml"
)

// alertsTest is the promtool test file of the chart's alerts.
const alertsTest = "testdata/alerts_test.yaml"

// TestAlerts runs the promtool tests of testdata/alerts_test.yaml on the rules the chart
// renders, and checks that each alert has a case that fires it and one that does not.
func TestAlerts(t *testing.T) {
	promtool := findPromtool(t)
	rule := find(t, renderChart(t, "--set", "prometheusRule.enabled=true"), "PrometheusRule", "cloud-provider-baremetal")
	// A PrometheusRule's spec is a Prometheus rule file.
	spec, ok := rule.Object["spec"]
	if !ok {
		t.Fatal("the PrometheusRule has no spec")
	}
	rules, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertsTest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}

	var parsed struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &parsed); err != nil {
		t.Fatalf("the rendered rules: %v", err)
	}
	var cases struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &cases); err != nil {
		t.Fatalf("%s: %v", alertsTest, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, test := range cases.Tests {
		for _, c := range test.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	alerts := 0
	for _, g := range parsed.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] {
				t.Errorf("%s: no case fires %s", alertsTest, r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no case where %s does not fire", alertsTest, r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("the PrometheusRule renders no alert:\n%s", rules)
	}

	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %v: %v\n%s\nrules.yaml:\n%s", args, err, out.String(), rules)
		}
	}
}

// findPromtool returns the path of promtool (Debian's prometheus package has it;
// hack/install-deps.sh installs it), or ends the test: skipped outside CI, failed in CI.
func findPromtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if !ci.Running() {
			t.Skipf("no promtool to test the chart's alerts with (%v): run `sudo make deps`, which takes it from Debian's prometheus package", err)
		}
		t.Fatalf("no promtool to test the chart's alerts with: %v", err)
	}
	return path
}
