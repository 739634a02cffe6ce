// Command testreport runs go test with the arguments it is given, reading the test's
// events (-json), and prints what a person needs of them: one line per package as go test
// does, the whole output of every failed test, which tests were skipped and why, grouped
// by reason, and a closing line "tests: N passed, N failed, N skipped". It exits with go
// test's exit code.
//
// `make test` runs it, so that a run that skips suites (without root, say) says so at the
// top and in its last line rather than only in skip lines no one reads.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if os.Geteuid() != 0 {
		fmt.Println("testreport: not root, so every test that creates network namespaces (the end-to-end, kube-proxy, netns and demo suites) is skipped; run `sudo make test` to run them")
	}
	args := append([]string{"test", "-json"}, os.Args[1:]...)
	cmd := exec.Command(goCommand(), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	r := newReport(os.Stdout)
	if err := r.read(out); err != nil {
		fatal(err)
	}
	err = cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fatal(err)
	case r.failed > 0:
		os.Exit(1)
	}
}

// goCommand is $GO (as make passes it), else go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
	os.Exit(1)
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// key names a test of a package; an empty Test is the package itself.
type key struct{ pkg, test string }

// skip is a skipped test and the reason it gave.
type skip struct {
	key
	reason string
}

// report holds the output of every test still running, and the counts so far.
type report struct {
	w                       io.Writer
	output                  map[key]*strings.Builder
	passed, failed, skipped int
	skips                   []skip
	// failedIn holds the packages with a failed test.
	failedIn map[string]bool
}

func newReport(w io.Writer) *report {
	return &report{w: w, output: make(map[key]*strings.Builder), failedIn: make(map[string]bool)}
}

// read consumes go test's events until r ends. A line that is not an event (go test's own
// messages) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "output":
		b := r.output[k]
		if b == nil {
			b = new(strings.Builder)
			r.output[k] = b
		}
		b.WriteString(e.Output)
	case "pass", "fail", "skip":
		if e.Test == "" {
			r.packageDone(e)
			return
		}
		out := r.take(k)
		switch e.Action {
		case "pass":
			r.passed++
		case "fail":
			r.failed++
			r.failedIn[e.Package] = true
			fmt.Fprint(r.w, out)
		case "skip":
			r.skipped++
			r.skips = append(r.skips, skip{k, skipReason(out)})
		}
	}
}

// take returns and forgets the output of k.
func (r *report) take(k key) string {
	b := r.output[k]
	delete(r.output, k)
	if b == nil {
		return ""
	}
	return b.String()
}

// packageDone prints the package's line. A failed package also prints what it said
// outside any finished test: a panic, a timeout, the output of the tests it cut short.
func (r *report) packageDone(e event) {
	out := r.take(key{e.Package, ""})
	var unfinished []string
	for k := range r.output {
		if k.pkg == e.Package {
			unfinished = append(unfinished, r.take(k))
		}
	}
	switch e.Action {
	case "pass":
		fmt.Fprintf(r.w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
	case "skip":
		// No test files.
	case "fail":
		for _, o := range unfinished {
			fmt.Fprint(r.w, o)
		}
		fmt.Fprint(r.w, out)
		if !strings.Contains(out, "FAIL\t"+e.Package) {
			fmt.Fprintf(r.w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		if !r.failedIn[e.Package] {
			// A package that failed without a failed test (a panic in init, a build
			// failure, a timeout) still counts.
			r.failed++
		}
	}
}

// skipReason returns the message a skipped test gave: its output after the RUN line
// and before the SKIP line, without the file:line prefix of t.Skip.
func skipReason(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if _, msg, ok := strings.Cut(t, ": "); ok && strings.Contains(t[:strings.Index(t, ": ")], ".go:") {
			t = msg
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "no reason given"
	}
	return lines[len(lines)-1]
}

// summary prints the skipped tests grouped by reason, then the closing line.
func (r *report) summary() {
	if len(r.skips) > 0 {
		fmt.Fprintf(r.w, "\nSkipped tests, by reason:\n")
		var reasons []string
		by := make(map[string][]skip)
		for _, s := range r.skips {
			if by[s.reason] == nil {
				reasons = append(reasons, s.reason)
			}
			by[s.reason] = append(by[s.reason], s)
		}
		for _, reason := range reasons {
			ss := by[reason]
			names := make([]string, 0, 3)
			for _, s := range ss[:min(3, len(ss))] {
				names = append(names, strings.TrimPrefix(s.pkg, modulePrefix)+"."+s.test)
			}
			more := ""
			if len(ss) > 3 {
				more = fmt.Sprintf(" and %d more", len(ss)-3)
			}
			fmt.Fprintf(r.w, "  %d: %s\n     (%s%s)\n", len(ss), reason, strings.Join(names, ", "), more)
		}
	}
	fmt.Fprintf(r.w, "\ntests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
}

// modulePrefix is left out of the package names in the summary.
const modulePrefix = "github.com/cloud-provider-baremetal/cloud-provider-baremetal/"
