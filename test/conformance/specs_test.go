package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// focus selects the specs that make conformance runs: every [Feature:LoadBalancer] one.
const focus = `\[Feature:LoadBalancer\]`

// expectation is a spec's row of docs/conformance.md: whether it passes, or is skipped and
// why.
type expectation struct {
	skip   bool
	reason string
}

// specRow matches a row of the table of docs/conformance.md: the spec's full text, and
// "passes" or "skipped: <reason>".
var specRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (passes|skipped: .+) \\|$")

// expected reads the table of docs/conformance.md: each spec's full text and expectation.
func expected() (map[string]expectation, error) {
	root, err := render.ManifestsDir()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(root), "docs", "conformance.md"))
	if err != nil {
		return nil, err
	}
	specs := map[string]expectation{}
	for _, m := range specRow.FindAllStringSubmatch(string(data), -1) {
		e := expectation{}
		if reason, ok := strings.CutPrefix(m[2], "skipped: "); ok {
			e = expectation{skip: true, reason: reason}
		}
		specs[m[1]] = e
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("docs/conformance.md has no table of specs")
	}
	return specs, nil
}

// skipRegexp is the --ginkgo.skip of the specs that are expected skipped.
func skipRegexp(specs map[string]expectation) string {
	var names []string
	for name, e := range specs {
		if e.skip {
			names = append(names, regexp.QuoteMeta(name))
		}
	}
	return strings.Join(names, "|")
}

// junitSuite is what the test reads of the JUnit report e2e.test writes.
type junitSuite struct {
	Cases []struct {
		Name    string `xml:"name,attr"`
		Status  string `xml:"status,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		} `xml:"failure"`
	} `xml:"testcase"`
}

// result is how a spec ended: passed, skipped or failed, and the failure's message.
type result struct {
	status, message string
}

// readReport returns each spec's result from the JUnit report at path, by the spec's full
// text.
func readReport(path string) (map[string]result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var suites struct {
		Suites []junitSuite `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	results := map[string]result{}
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			name, ok := strings.CutPrefix(c.Name, "[It] ")
			if !ok {
				continue
			}
			r := result{status: c.Status}
			if c.Failure != nil {
				r.message = strings.TrimSpace(c.Failure.Message + "\n" + c.Failure.Text)
			}
			results[name] = r
		}
	}
	return results, nil
}
