package docs

import (
	"fmt"
	"go/ast"
	"go/token"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version/verflag"
)

const (
	flagsPage    = "docs/configuration.md"
	flagsSection = "## Flags"

	optionsImport = "k8s.io/cloud-provider/options"
	verflagImport = "k8s.io/component-base/version/verflag"
	logsapiImport = "k8s.io/component-base/logs/api/v1"
)

// flagDefiners are the methods and functions of pflag and flag that define a flag. Those
// whose name ends in Var or VarP take the flag's name second, the others first.
var flagDefiners = map[string]bool{}

func init() {
	for _, typ := range []string{"", "Bool", "BoolSlice", "BytesHex", "BytesBase64", "Count", "Duration", "DurationSlice",
		"Float32", "Float32Slice", "Float64", "Float64Slice", "Int", "Int8", "Int16", "Int32", "Int32Slice", "Int64",
		"Int64Slice", "IntSlice", "IP", "IPMask", "IPNet", "IPNetSlice", "IPSlice", "String", "StringArray", "StringSlice",
		"StringToInt", "StringToInt64", "StringToString", "Text", "Time", "Uint", "Uint8", "Uint16", "Uint32", "Uint64",
		"UintSlice", "Func", "BoolFunc"} {
		for _, suffix := range []string{"", "P", "Var", "VarP"} {
			if typ != "" || strings.HasPrefix(suffix, "Var") {
				flagDefiners[typ+suffix] = true
			}
		}
	}
}

// projectFlags returns the flags the code in dir and below defines, with where, and the
// import paths of the packages whose AddFlags it calls (component-base's version and
// logging flags, which are not the project's).
func projectFlags(t *testing.T, dir string) (flags map[string]string, adds map[string]bool) {
	t.Helper()
	flags = make(map[string]string)
	adds = make(map[string]bool)
	pkgs := modulePackages(t)
	for _, pkg := range packagesUnder(pkgs, dir) {
		for _, f := range pkg.files {
			s := scope{pkgs, pkg, f}
			ast.Inspect(f.ast, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := c.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && sel.Sel.Name == "AddFlags" && f.imports[id.Name] != "" {
					adds[f.imports[id.Name]] = true
				}
				if !flagDefiners[sel.Sel.Name] {
					return true
				}
				// strings.Count("...", ...) is no flag: of the packages, only flag and
				// pflag define flags.
				if id, ok := sel.X.(*ast.Ident); ok {
					if ip := f.imports[id.Name]; ip != "" && ip != "flag" && ip != "github.com/spf13/pflag" {
						return true
					}
				}
				arg := 0
				if strings.HasSuffix(sel.Sel.Name, "Var") || strings.HasSuffix(sel.Sel.Name, "VarP") {
					arg = 1
				}
				if len(c.Args) <= arg {
					return true
				}
				if name, ok := s.str(c.Args[arg]); ok {
					flags[name] = pos(c)
				}
				return true
			})
		}
	}
	if len(flags) == 0 {
		t.Fatalf("found no flag defined in %s/; has the way flags are defined changed? This test reads calls such as fs.StringVar(&v, \"name\", ...)", dir)
	}
	return flags, adds
}

// upstreamDefault is the default of an upstream flag that the ccm changes.
type upstreamDefault struct {
	// field is the option set, as opts.A.B.
	field string
	// at is where the ccm sets it.
	at string
	// value is the flag's default as the ccm sets it; empty when the test could not
	// evaluate the value the code assigns.
	value string
}

// ccmFlags returns the flags of the upstream cloud-controller-manager command, with their
// defaults.
func ccmFlags(o *options.CloudControllerManagerOptions) map[string]string {
	cmd := app.NewCloudControllerManagerCommand(o, nil, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	out := make(map[string]string)
	cmd.Flags().VisitAll(func(f *pflag.Flag) { out[f.Name] = f.DefValue })
	return out
}

// changedDefaults finds where the ccm changes upstream's defaults: the assignments to
// fields of what options.NewCloudControllerManagerOptions returned. It makes each change
// on fresh options and sees which flags' defaults it moves, so that the flags are found
// by the options they are bound to, as the program binds them, not by a list kept here.
func changedDefaults(t *testing.T, upstream map[string]string) map[string]upstreamDefault {
	t.Helper()
	pkgs := modulePackages(t)
	type assignment struct {
		path  []string
		value ast.Expr
		s     scope
		at    string
	}
	var optsVar string
	var sets []assignment
	ccm := packagesUnder(pkgs, "ccm")
	for _, pkg := range ccm {
		for _, f := range pkg.files {
			ast.Inspect(f.ast, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok || len(as.Rhs) == 0 {
					return true
				}
				if c, ok := as.Rhs[0].(*ast.CallExpr); ok {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && f.isPkg(sel.X, optionsImport) && strings.HasPrefix(sel.Sel.Name, "NewCloudControllerManagerOptions") {
						if sel.Sel.Name != "NewCloudControllerManagerOptions" {
							t.Errorf("%s: options.%s: this test reads only the defaults changed by assignments to the options of options.NewCloudControllerManagerOptions", pos(c), sel.Sel.Name)
						}
						optsVar = as.Lhs[0].(*ast.Ident).Name
					}
				}
				return true
			})
		}
	}
	if optsVar == "" {
		t.Fatal("ccm/ does not call options.NewCloudControllerManagerOptions; this test reads the upstream defaults the ccm changes from assignments to its options")
	}
	for _, pkg := range ccm {
		for _, f := range pkg.files {
			ast.Inspect(f.ast, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok || as.Tok != token.ASSIGN || len(as.Lhs) != len(as.Rhs) {
					return true
				}
				for i, lhs := range as.Lhs {
					var path []string
					e := lhs
					for {
						sel, ok := e.(*ast.SelectorExpr)
						if !ok {
							break
						}
						path = append([]string{sel.Sel.Name}, path...)
						e = sel.X
					}
					if id, ok := e.(*ast.Ident); ok && id.Name == optsVar && len(path) > 0 {
						sets = append(sets, assignment{path, as.Rhs[i], scope{pkgs, pkg, f}, pos(as)})
					}
				}
				return true
			})
		}
	}
	out := make(map[string]upstreamDefault)
	for _, a := range sets {
		field := optsVar + "." + strings.Join(a.path, ".")
		o, err := options.NewCloudControllerManagerOptions()
		if err != nil {
			t.Fatal(err)
		}
		literal, err := setField(reflect.ValueOf(o), a.path, a.value, a.s)
		if err != nil {
			t.Errorf("%s: %s: %v", a.at, field, err)
			continue
		}
		moved := 0
		for name, def := range ccmFlags(o) {
			if def == upstream[name] {
				continue
			}
			moved++
			d := upstreamDefault{field: field, at: a.at}
			if literal {
				d.value = def
			}
			out[name] = d
		}
		if moved == 0 {
			// An option no flag shows, or set to upstream's own default: nothing for
			// the flag table.
			t.Logf("%s: %s moves no flag's default", a.at, field)
		}
	}
	return out
}

// setField sets the field at path of the struct v points to, to the value of e when the
// test can evaluate it (a literal or a constant), else to another value than it has, and
// says which.
func setField(v reflect.Value, path []string, e ast.Expr, s scope) (literal bool, err error) {
	for _, name := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return false, fmt.Errorf("the options have no %s: nil before it", name)
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return false, fmt.Errorf("the options have no %s: not a struct before it", name)
		}
		if v = v.FieldByName(name); !v.IsValid() {
			return false, fmt.Errorf("the options have no field %s", name)
		}
	}
	lit, isLit := e.(*ast.BasicLit)
	switch v.Kind() {
	case reflect.String:
		str, ok := s.str(e)
		if !ok {
			str = v.String() + "-changed"
		}
		v.SetString(str)
		return ok, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if isLit && lit.Kind == token.INT {
			n, err := strconv.ParseInt(lit.Value, 0, 64)
			if err != nil {
				return false, err
			}
			v.SetInt(n)
			return true, nil
		}
		v.SetInt(v.Int() + 1)
		return false, nil
	case reflect.Float32, reflect.Float64:
		if isLit && (lit.Kind == token.INT || lit.Kind == token.FLOAT) {
			n, err := strconv.ParseFloat(lit.Value, 64)
			if err != nil {
				return false, err
			}
			v.SetFloat(n)
			return true, nil
		}
		v.SetFloat(v.Float() + 1)
		return false, nil
	case reflect.Bool:
		if id, ok := e.(*ast.Ident); ok && (id.Name == "true" || id.Name == "false") {
			v.SetBool(id.Name == "true")
			return true, nil
		}
		v.SetBool(!v.Bool())
		return false, nil
	}
	return false, fmt.Errorf("this test cannot set an option of kind %s; teach setField", v.Kind())
}

var flagRE = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)$`)

// flagRows reads the flag table of a program's section of the Flags: the flags each row
// names, in backquotes in its first cell, and the row.
func flagRows(t *testing.T, program string) (map[string]row, []string) {
	t.Helper()
	lines := readPage(t, flagsPage)
	flagsSec, ok := section(lines, flagsSection)
	if !ok {
		t.Fatalf("%s has no section %q", flagsPage, flagsSection)
	}
	sec, ok := section(flagsSec, "### "+program)
	if !ok {
		t.Fatalf("%s, %s has no section ### %s", flagsPage, flagsSection, program)
	}
	tb, ok := tableWith(sec, "flag")
	if !ok {
		t.Fatalf("%s, %s, ### %s has no table whose first column is \"flag\"", flagsPage, flagsSection, program)
	}
	rows := make(map[string]row)
	var order []string
	for _, r := range tb.rows {
		var named []string
		for _, c := range code(r.cells[0]) {
			if m := flagRE.FindStringSubmatch(c); m != nil {
				named = append(named, m[1])
			}
		}
		if len(named) == 0 {
			t.Errorf("%s:%d: a row of the flags of %s that names no flag as `--name` in its first cell", flagsPage, r.index+1, program)
		}
		for _, n := range named {
			if other, ok := rows[n]; ok {
				t.Errorf("%s:%d: flag --%s of %s has a row already, at line %d; keep one", flagsPage, r.index+1, n, program, other.index+1)
				continue
			}
			rows[n] = r
			order = append(order, n)
		}
	}
	return rows, order
}

// cell returns cell i of r, or "".
func (r row) cell(i int) string {
	if i < len(r.cells) {
		return r.cells[i]
	}
	return ""
}

// says reports whether text holds value as a word of its own: "10" in "10 (upstream 1)"
// but not in "100".
func says(text, value string) bool {
	return regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(value) + `($|[^\w.])`).MatchString(text)
}

// TestFlagsCCM checks the flag table of baremetal-ccm in docs/configuration.md: it has a
// row for every flag ccm/ defines and for every upstream flag whose default the ccm
// changes, with that default; and each of its rows names a flag baremetal-ccm has.
func TestFlagsCCM(t *testing.T) {
	own, _ := projectFlags(t, "ccm")
	base, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	upstream := ccmFlags(base)
	changed := changedDefaults(t, upstream)
	if len(changed) == 0 {
		t.Error("found no upstream flag whose default the ccm changes; has the way it changes them moved? This test reads assignments to the fields of options.NewCloudControllerManagerOptions()'s result in ccm/")
	}
	t.Logf("ccm/ defines %q and changes the defaults of %q", sortedKeys(own), sortedKeys(changed))
	rows, order := flagRows(t, "baremetal-ccm")
	where := fmt.Sprintf("the table of %s, %s, ### baremetal-ccm", flagsPage, flagsSection)

	for _, name := range sortedKeys(own) {
		if _, ok := rows[name]; !ok {
			t.Errorf("flag --%s, defined at %s, is not in %s: add a row with its default and what it is for", name, own[name], where)
		}
		if _, ok := upstream[name]; ok {
			t.Errorf("flag --%s, defined at %s, is upstream's too", name, own[name])
		}
	}
	for _, name := range sortedKeys(changed) {
		d := changed[name]
		r, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("%s sets %s, so upstream flag --%s defaults to %q here, not %q; it is not in %s: add a row with the new default and why", d.at, d.field, name, d.value, upstream[name], where)
		case d.value != "" && !says(r.cell(1), d.value):
			t.Errorf("%s:%d: the default of --%s is %q (%s sets %s), the row says %q: fix the row", flagsPage, r.index+1, name, d.value, d.at, d.field, r.cell(1))
		}
	}
	for _, name := range order {
		r := rows[name]
		_, isOwn := own[name]
		_, isUpstream := upstream[name]
		_, isChanged := changed[name]
		switch {
		case !isOwn && !isUpstream:
			t.Errorf("%s:%d: --%s is no flag of baremetal-ccm: neither ccm/ defines it nor the upstream cloud-controller-manager; remove the row or fix the name", flagsPage, r.index+1, name)
		case isUpstream && !isChanged && r.cell(2) == "":
			t.Errorf("%s:%d: upstream flag --%s, whose default the ccm keeps, has a row that says nothing of why it matters here: say why, or remove the row (baremetal-ccm --help lists it)", flagsPage, r.index+1, name)
		}
	}
}

// TestFlagsAgent checks the flag table of baremetal-agent in docs/configuration.md: it
// has a row for every flag agent/ defines, and each of its rows names a flag of the agent.
func TestFlagsAgent(t *testing.T) {
	own, adds := projectFlags(t, "agent")
	// The version and logging flags the agent takes from component-base, as agent/
	// adds them: not the project's, but a row may still name one.
	others := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	if adds[verflagImport] {
		verflag.AddFlags(others)
	}
	if adds[logsapiImport] {
		logsapi.AddFlags(logsapi.NewLoggingConfiguration(), others)
	}
	t.Logf("agent/ defines %q", sortedKeys(own))
	rows, order := flagRows(t, "baremetal-agent")
	for _, name := range sortedKeys(own) {
		if _, ok := rows[name]; !ok {
			t.Errorf("flag --%s, defined at %s, is not in the table of %s, %s, ### baremetal-agent: add a row with its default and what it is for", name, own[name], flagsPage, flagsSection)
		}
	}
	for _, name := range order {
		if _, ok := own[name]; !ok && others.Lookup(name) == nil {
			t.Errorf("%s:%d: --%s is no flag of baremetal-agent: agent/ defines no such flag; remove the row or fix the name", flagsPage, rows[name].index+1, name)
		}
	}
}

// sortedKeys returns the keys of m in order, so that messages come in the same order on
// every run.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
