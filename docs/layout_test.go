package docs

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayout checks the rules the Layout table of development.md states: nothing but the
// test suites imports a package of test/ (the product, and its release and image tooling,
// stand without the test harness), and neither program's packages import the other's.
func TestLayout(t *testing.T) {
	mod, err := modulePath()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], mod)
		if !ok {
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			switch {
			case under(dep, "/test") && !under(pkg, "/test"):
				t.Errorf("%s imports %s: only the tests may use the test harness", fields[0], imp)
			case under(pkg, "/ccm") && under(dep, "/agent"), under(pkg, "/agent") && under(dep, "/ccm"):
				t.Errorf("%s imports %s: one program's packages import nothing of the other's", fields[0], imp)
			}
		}
	}
}

// under reports whether the package at path (within the module, from its root) is dir or
// below it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }
