package docs

import (
	"flag"
	"fmt"
	"go/ast"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the metrics table of "+metricsPage+" from the code")

const (
	metricsPage    = "docs/operations.md"
	metricsSection = "## Metrics"
	// updateMetrics is what a reader runs to bring the table in line with the code.
	updateMetrics = "go test ./docs -run TestMetrics -update"
	metricsImport = "k8s.io/component-base/metrics"
)

var metricsHeader = []string{"metric", "type", "labels", "what it counts"}

// metric is a metric the programs define.
type metric struct {
	name, typ, help string
	labels          []string
	// at is where the code defines it, as file:line.
	at string
}

// optsTypes are the options of component-base's metrics, by the type of metric they make.
var optsTypes = map[string]string{
	"CounterOpts":         "counter",
	"GaugeOpts":           "gauge",
	"HistogramOpts":       "histogram",
	"SummaryOpts":         "summary",
	"TimingHistogramOpts": "histogram",
}

// valueTypes are the metric types of a const metric's ValueType.
var valueTypes = map[string]string{
	"CounterValue": "counter",
	"GaugeValue":   "gauge",
	"UntypedValue": "untyped",
}

// constMetrics are the functions that make a metric of a Desc; the type is the second
// argument's unless given here.
var constMetrics = map[string]string{
	"NewLazyConstMetric":         "",
	"NewConstMetric":             "",
	"MustNewConstMetric":         "",
	"NewLazyMetricWithTimestamp": "",
	"NewConstHistogram":          "histogram",
	"MustNewConstHistogram":      "histogram",
	"NewConstSummary":            "summary",
	"MustNewConstSummary":        "summary",
}

// isConstMetric reports whether fn makes a metric of a Desc, which tells the Desc's type.
func isConstMetric(fn string) bool {
	_, ok := constMetrics[fn]
	return ok
}

// codeMetrics collects every metric the programs define, by reading their source: the
// *Opts given to a metrics.New* and the metrics.NewDesc of the collectors. problems are
// what the test could not read, each saying where.
func codeMetrics(t *testing.T) (ms []metric, problems []string) {
	for _, pkg := range modulePackages(t) {
		m, p := packageMetrics(modulePackages(t), pkg)
		ms = append(ms, m...)
		problems = append(problems, p...)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	sort.Strings(problems)
	return ms, problems
}

// packageMetrics collects the metrics of one package; see codeMetrics.
func packageMetrics(pkgs map[string]*goPackage, pkg *goPackage) (ms []metric, problems []string) {
	// Descs are made in one place and used in another, maybe another file: their types
	// are known once the whole package is read.
	descs := make(map[string]*metric)
	descTypes := make(map[string][]string)
	for _, f := range pkg.files {
		s := scope{pkgs, pkg, f}
		isMetrics := func(e ast.Expr, name string) bool {
			sel, ok := e.(*ast.SelectorExpr)
			return ok && f.isPkg(sel.X, metricsImport) && (name == "" || sel.Sel.Name == name)
		}
		used := make(map[*ast.CompositeLit]bool)
		// descVars are the variables NewDesc calls are assigned to: Inspect visits the
		// assignment before the call.
		descVars := make(map[*ast.CallExpr]string)
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if c, ok := v.(*ast.CallExpr); ok && i < len(n.Names) {
						descVars[c] = n.Names[i].Name
					}
				}
			case *ast.AssignStmt:
				for i, v := range n.Rhs {
					if c, ok := v.(*ast.CallExpr); ok && i < len(n.Lhs) {
						if id, ok := n.Lhs[i].(*ast.Ident); ok {
							descVars[c] = id.Name
						}
					}
				}
			case *ast.CallExpr:
				if !isMetrics(n.Fun, "") {
					return true
				}
				fn := n.Fun.(*ast.SelectorExpr).Sel.Name
				switch {
				case fn == "NewDesc":
					m, p := descMetric(s, n)
					problems = append(problems, p...)
					if m == nil {
						return true
					}
					if v, ok := descVars[n]; ok {
						descs[v] = m
					} else {
						problems = append(problems, fmt.Sprintf("%s: metric %s: the Desc is not assigned to a variable, so the test cannot tell its type from the metrics made of it", m.at, m.name))
					}
				case isConstMetric(fn):
					if len(n.Args) == 0 {
						break
					}
					id, ok := n.Args[0].(*ast.Ident)
					if !ok {
						break
					}
					typ := constMetrics[fn]
					if typ == "" {
						typ = "?"
						if len(n.Args) > 1 {
							if vt, ok := n.Args[1].(*ast.SelectorExpr); ok && isMetrics(vt, "") && valueTypes[vt.Sel.Name] != "" {
								typ = valueTypes[vt.Sel.Name]
							}
						}
					}
					descTypes[id.Name] = append(descTypes[id.Name], typ)
				case strings.HasPrefix(fn, "New") && len(n.Args) > 0:
					lit := optsLit(n.Args[0], isMetrics)
					if lit == nil {
						break
					}
					used[lit] = true
					m, p := optsMetric(s, lit)
					problems = append(problems, p...)
					if m == nil {
						break
					}
					if strings.HasSuffix(fn, "Vec") {
						var ok bool
						if len(n.Args) < 2 {
							problems = append(problems, fmt.Sprintf("%s: metric %s: %s without labels", m.at, m.name, fn))
						} else if m.labels, ok = labelList(s, n.Args[1]); !ok {
							problems = append(problems, fmt.Sprintf("%s: metric %s: its labels are not a []string of literals or constants, so the test cannot check them; write them so", m.at, m.name))
						}
					}
					ms = append(ms, *m)
				}
			case *ast.CompositeLit:
				if optsLit(n, isMetrics) != nil && !used[n] {
					// Inspect visits a call before its arguments, so a literal not marked
					// by now is not the argument of a metrics.New*.
					problems = append(problems, fmt.Sprintf("%s: metric options not given straight to a metrics.New*, so the test cannot tell the metric's labels; write metrics.NewXxx(&metrics.XxxOpts{...}, ...)", pos(n)))
				}
			}
			return true
		})
	}
	for v, m := range descs {
		types := slices.Compact(slices.Sorted(slices.Values(descTypes[v])))
		switch {
		case len(types) == 1 && types[0] != "?":
			m.typ = types[0]
		case len(types) == 0:
			problems = append(problems, fmt.Sprintf("%s: metric %s: no metric is made of its Desc %s in package %s, so the test cannot tell its type", m.at, m.name, v, pkg.dir))
			continue
		default:
			problems = append(problems, fmt.Sprintf("%s: metric %s: the metrics made of its Desc %s have the types %v; the test wants one, from metrics.CounterValue or metrics.GaugeValue", m.at, m.name, v, types))
			continue
		}
		ms = append(ms, *m)
	}
	return ms, problems
}

// optsLit returns the *Opts literal e is, or points to, or nil.
func optsLit(e ast.Expr, isMetrics func(ast.Expr, string) bool) *ast.CompositeLit {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok || !isMetrics(lit.Type, "") {
		return nil
	}
	if _, ok := optsTypes[lit.Type.(*ast.SelectorExpr).Sel.Name]; !ok {
		return nil
	}
	return lit
}

// optsMetric reads the metric of a *Opts literal; its name is built as Prometheus builds
// it, from Namespace, Subsystem and Name.
func optsMetric(s scope, lit *ast.CompositeLit) (*metric, []string) {
	fields := make(map[string]string)
	var problems []string
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, []string{fmt.Sprintf("%s: metric options without field names; the test reads Namespace, Subsystem, Name and Help by name", pos(lit))}
		}
		key := kv.Key.(*ast.Ident).Name
		switch key {
		case "Namespace", "Subsystem", "Name", "Help":
			v, ok := s.str(kv.Value)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: the %s of these metric options is not a string literal or constant, so the test cannot read it", pos(kv), key))
			}
			fields[key] = v
		}
	}
	if fields["Name"] == "" {
		return nil, append(problems, fmt.Sprintf("%s: metric options without a Name", pos(lit)))
	}
	var parts []string
	for _, p := range []string{fields["Namespace"], fields["Subsystem"], fields["Name"]} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return &metric{
		name: strings.Join(parts, "_"),
		typ:  optsTypes[lit.Type.(*ast.SelectorExpr).Sel.Name],
		help: fields["Help"],
		at:   pos(lit),
	}, problems
}

// descMetric reads metrics.NewDesc(fqName, help, variableLabels, ...).
func descMetric(s scope, c *ast.CallExpr) (*metric, []string) {
	if len(c.Args) < 3 {
		return nil, []string{fmt.Sprintf("%s: metrics.NewDesc with %d arguments", pos(c), len(c.Args))}
	}
	name, ok := s.str(c.Args[0])
	if !ok {
		return nil, []string{fmt.Sprintf("%s: the name given to metrics.NewDesc is not a string literal or constant, so the test cannot read it", pos(c))}
	}
	m := &metric{name: name, at: pos(c)}
	var problems []string
	if m.help, ok = s.str(c.Args[1]); !ok {
		problems = append(problems, fmt.Sprintf("%s: metric %s: its help is not a string literal or constant, so the test cannot read it", m.at, name))
	}
	if m.labels, ok = labelList(s, c.Args[2]); !ok {
		problems = append(problems, fmt.Sprintf("%s: metric %s: its labels are not nil or a []string of literals or constants, so the test cannot check them; write them so", m.at, name))
	}
	return m, problems
}

// labelList reads a []string{...} of labels, or nil.
func labelList(s scope, e ast.Expr) ([]string, bool) {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return nil, true
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, false
	}
	if at, ok := lit.Type.(*ast.ArrayType); !ok || at.Len != nil || fmt.Sprint(at.Elt) != "string" {
		return nil, false
	}
	var out []string
	for _, e := range lit.Elts {
		v, ok := s.str(e)
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// metricRow is the row of m in the table: the description is the Help, with the pipes
// escaped so that they stay in their cell.
func metricRow(m metric) string {
	labels := make([]string, len(m.labels))
	for i, l := range m.labels {
		labels[i] = "`" + l + "`"
	}
	help := strings.ReplaceAll(strings.Join(strings.Fields(m.help), " "), "|", `\|`)
	line := "|"
	for _, c := range []string{"`" + m.name + "`", m.typ, strings.Join(labels, ", "), help} {
		line += strings.TrimSuffix(" "+c, " ") + " |"
	}
	return line
}

// metricsTable is the table of ms as the page has it.
func metricsTable(ms []metric) []string {
	out := []string{"| " + strings.Join(metricsHeader, " | ") + " |", "| --- | --- | --- | --- |"}
	for _, m := range ms {
		out = append(out, metricRow(m))
	}
	return out
}

// TestMetrics checks that the metrics table of docs/operations.md lists every metric the
// programs define, and nothing else, each with the type, labels and Help the code gives
// it; that no other page defines a metric in a table of its own; and that every metric
// a page names exists. With -update it writes the table from the code first.
func TestMetrics(t *testing.T) {
	ms, problems := codeMetrics(t)
	for _, p := range problems {
		t.Error(p)
	}
	byName := make(map[string]metric)
	for _, m := range ms {
		if other, ok := byName[m.name]; ok {
			t.Errorf("metric %s is defined twice, at %s and at %s", m.name, other.at, m.at)
		}
		byName[m.name] = m
	}
	if len(ms) == 0 {
		t.Fatal("found no metric in the code; has the way metrics are defined changed? This test reads metrics.New*(&metrics.*Opts{...}) and metrics.NewDesc")
	}

	lines := readPage(t, metricsPage)
	if *update {
		lines = writeMetricsTable(t, lines, ms)
	}
	sec, ok := section(lines, metricsSection)
	if !ok {
		t.Fatalf("%s has no section %q; the metrics table belongs there", metricsPage, metricsSection)
	}
	tb, ok := tableWith(sec, metricsHeader...)
	if !ok {
		t.Fatalf("%s, %s: no table with the header | %s |; run %s", metricsPage, metricsSection, strings.Join(metricsHeader, " | "), updateMetrics)
	}
	documented := make(map[string]bool)
	for _, r := range tb.rows {
		at := fmt.Sprintf("%s:%d", metricsPage, r.index+1)
		names := code(r.cells[0])
		if len(names) != 1 || len(r.cells) != len(metricsHeader) {
			t.Errorf("%s: a row of the metrics table must name one metric in backquotes and have %d cells: %q; run %s", at, len(metricsHeader), lines[r.index], updateMetrics)
			continue
		}
		name := names[0]
		if documented[name] {
			t.Errorf("%s: metric %s is listed twice; run %s", at, name, updateMetrics)
		}
		documented[name] = true
		m, ok := byName[name]
		if !ok {
			t.Errorf("%s: metric %s is in the table but no code defines it (renamed or removed?); run %s", at, name, updateMetrics)
			continue
		}
		if r.cells[1] != m.typ {
			t.Errorf("%s: metric %s is a %s (%s), the table says %q; run %s", at, name, m.typ, m.at, r.cells[1], updateMetrics)
		}
		if labels := code(r.cells[2]); !slices.Equal(labels, m.labels) {
			t.Errorf("%s: metric %s has the labels %q (%s), the table says %q; run %s", at, name, m.labels, m.at, labels, updateMetrics)
		}
		if want := cells(metricRow(m))[3]; r.cells[3] != want {
			t.Errorf("%s: the description of metric %s is not its Help (%s); run %s", at, name, m.at, updateMetrics)
		}
	}
	for _, m := range ms {
		if !documented[m.name] {
			t.Errorf("metric %s, defined at %s, is not in the metrics table of %s; run %s", m.name, m.at, metricsPage, updateMetrics)
		}
	}
	if want := metricsTable(ms); !slices.Equal(lines[tb.start:tb.end], want) {
		t.Errorf("%s:%d: the metrics table is not as the code makes it (sorted by name, one row per metric); run %s", metricsPage, tb.start+1, updateMetrics)
	}

	checkMetricMentions(t, byName, tb)
}

// checkMetricMentions checks that every page defines no metric but in the table of
// docs/operations.md, and names only metrics that exist.
func checkMetricMentions(t *testing.T, byName map[string]metric, tb table) {
	// The prefixes of the project's metrics ("baremetal_ccm_"): a word that starts with
	// one is taken for a metric's name.
	prefixes := make(map[string]bool)
	for name := range byName {
		if parts := strings.SplitN(name, "_", 3); len(parts) == 3 {
			prefixes[regexp.QuoteMeta(parts[0]+"_"+parts[1]+"_")] = true
		}
	}
	mention := regexp.MustCompile(`\b(?:` + strings.Join(slices.Sorted(maps.Keys(prefixes)), "|") + `)\w*[A-Za-z0-9](?:_?\*)?`)
	for _, page := range pages(t) {
		lines := readPage(t, page)
		for i, l := range lines {
			for _, name := range mention.FindAllString(l, -1) {
				// baremetal_ccm_* names a family of metrics, not one.
				if !strings.HasSuffix(name, "*") && !exists(byName, name) {
					t.Errorf("%s:%d names metric %s, which no code defines (renamed or removed?): fix the page", page, i+1, name)
				}
			}
		}
		for _, other := range tables(outsideFences(lines)) {
			if page == metricsPage && other.start == tb.start {
				continue
			}
			for _, r := range other.rows {
				if names := code(r.cells[0]); len(names) == 1 {
					if _, ok := byName[names[0]]; ok {
						t.Errorf("%s:%d defines metric %s in a table; its one definition is the table of %s, %s: name it in prose here", page, r.index+1, names[0], metricsPage, metricsSection)
					}
				}
			}
		}
	}
}

// exists reports whether name is a metric, or a series Prometheus makes of one.
func exists(byName map[string]metric, name string) bool {
	if _, ok := byName[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if m, ok := byName[strings.TrimSuffix(name, suffix)]; ok && (m.typ == "histogram" || m.typ == "summary") {
			return true
		}
	}
	return false
}

// writeMetricsTable writes the table of ms into the Metrics section of the page, in place
// of the one there, or at the end of the section, and returns the page's new lines.
func writeMetricsTable(t *testing.T, lines []string, ms []metric) []string {
	sec, ok := section(lines, metricsSection)
	if !ok {
		t.Fatalf("%s has no section %q to write the metrics table in; add the heading", metricsPage, metricsSection)
	}
	var out []string
	if tb, ok := tableWith(sec, metricsHeader...); ok {
		out = slices.Concat(lines[:tb.start], metricsTable(ms), lines[tb.end:])
	} else {
		// After the section's last non-blank line, with a blank line before and after.
		end := 0
		for i, l := range sec {
			if strings.TrimSpace(l) != "" {
				end = i + 1
			}
		}
		if end == 0 {
			t.Fatalf("%s, %s: the section is empty; write a sentence of what its metrics are, then run %s", metricsPage, metricsSection, updateMetrics)
		}
		out = slices.Concat(lines[:end], []string{""}, metricsTable(ms), lines[end:])
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(metricsPage)), []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote the metrics table of %s from the code", metricsPage)
	return out
}
