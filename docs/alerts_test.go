package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// alertRE finds the alerts of the chart's rule template.
var alertRE = regexp.MustCompile(`(?m)^\s*- alert: (\w+)\s*$`)

// TestAlerts checks that the Alerts table of docs/operations.md has one row for each alert
// of the chart's PrometheusRule, and no other: an operator paged by one finds there what
// it means and what to do.
func TestAlerts(t *testing.T) {
	const template = "charts/cloud-provider-baremetal/templates/prometheusrule.yaml"
	data, err := os.ReadFile(filepath.Join(root, template))
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, m := range alertRE.FindAllStringSubmatch(string(data), -1) {
		alerts = append(alerts, m[1])
	}
	if len(alerts) == 0 {
		t.Fatalf("%s: no alert found; has its layout changed?", template)
	}
	const page = "docs/operations.md"
	lines, ok := section(readPage(t, page), "## Alerts")
	if !ok {
		t.Fatalf("%s has no ## Alerts section", page)
	}
	tb, ok := tableWith(lines, "alert")
	if !ok {
		t.Fatalf("%s: ## Alerts has no table whose first column is alert", page)
	}
	var documented []string
	for _, r := range tb.rows {
		names := code(r.cells[0])
		if len(names) != 1 {
			t.Errorf("%s:%d: the alert cell %q should name one alert in backquotes", page, r.index+1, r.cells[0])
			continue
		}
		if slices.Contains(documented, names[0]) {
			t.Errorf("%s:%d: %s has a second row", page, r.index+1, names[0])
		}
		documented = append(documented, names[0])
		if !slices.Contains(alerts, names[0]) {
			t.Errorf("%s:%d: %s is no alert of %s", page, r.index+1, names[0], template)
		}
	}
	for _, a := range alerts {
		if !slices.Contains(documented, a) {
			t.Errorf("%s: alert %s of %s has no row in ## Alerts: say when it fires and what to do", page, a, template)
		}
	}
}
