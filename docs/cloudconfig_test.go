package docs

import (
	"fmt"
	"go/ast"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/config"
)

const (
	configPage    = "docs/configuration.md"
	configSection = "## The cloud-config"
)

// renamedKeys are the fields of the config types whose key in the file is not their name
// with a lower-case first letter, as Type.Field: the parser reads the file's own tree
// (config/parse.go), not tags, so this is where the test learns the exceptions.
var renamedKeys = map[string]string{
	"Pool.Ranges": "addresses",
}

// minimalConfig is the smallest valid cloud-config: every field it leaves out has its
// default.
const minimalConfig = "pools:\n- name: default\n  addresses: [192.0.2.0/28]\n"

// configField is a field of the cloud-config.
type configField struct {
	// path is as the docs and the parser's messages name it: pools[].name.
	path string
	// goPath is the field in the Go types: Config.Pools[].Name.
	goPath string
	// value is the field of a config that leaves it out: its default.
	value reflect.Value
}

// keyLists reads the lists of the keys each mapping of the file may have, which the
// parser checks the file against (var poolFields = []string{...} in config/), by the
// name of the list.
func keyLists(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := modulePackages(t)
	out := make(map[string][]string)
	for _, pkg := range packagesUnder(pkgs, "config") {
		if pkg.dir != "config" {
			continue
		}
		for _, f := range pkg.files {
			s := scope{pkgs, pkg, f}
			for _, decl := range f.ast.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !strings.HasSuffix(name.Name, "Fields") || i >= len(vs.Values) {
							continue
						}
						if keys, ok := labelList(s, vs.Values[i]); ok {
							out[name.Name] = keys
						}
					}
				}
			}
		}
	}
	return out
}

// configFields walks the config types by reflection and returns every field a file can
// set, with its default, in the order of the types. The keys come from the parser's lists
// (keyLists): a Go field without a key there, or a key without a field, is an error.
func configFields(t *testing.T) []configField {
	t.Helper()
	cfg, err := config.Parse("minimal.yaml", []byte(minimalConfig))
	if err != nil {
		t.Fatalf("the minimal cloud-config of this test does not parse: %v", err)
	}
	lists := keyLists(t)
	pkgPath := reflect.TypeOf(config.Config{}).PkgPath()
	var out []configField
	var walk func(v reflect.Value, path, goPath string)
	walk = func(v reflect.Value, path, goPath string) {
		typ := v.Type()
		listName := lowerFirst(typ.Name()) + "Fields"
		keys, ok := lists[listName]
		if !ok {
			t.Errorf("config/ has no list %s of the keys of a %s in the file, which this test reads the keys from", listName, typ.Name())
			return
		}
		used := make(map[string]bool)
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			key, ok := renamedKeys[typ.Name()+"."+f.Name]
			if !ok {
				key = lowerFirst(f.Name)
			}
			if !slices.Contains(keys, key) {
				t.Errorf("config.%s.%s: its key would be %q, which is not in %s of config/; if the file names it otherwise, add it to renamedKeys in this test", typ.Name(), f.Name, key, listName)
				continue
			}
			used[key] = true
			fv := v.Field(i)
			switch {
			case f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == pkgPath:
				walk(fv, path+key+".", goPath+f.Name+".")
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct && f.Type.Elem().PkgPath() == pkgPath:
				elem := reflect.New(f.Type.Elem()).Elem()
				if fv.Len() > 0 {
					elem = fv.Index(0)
				}
				walk(elem, path+key+"[].", goPath+f.Name+"[].")
			default:
				out = append(out, configField{path: path + key, goPath: goPath + f.Name, value: fv})
			}
		}
		for _, k := range keys {
			if !used[k] {
				t.Errorf("key %q of %s in config/ is no field of config.%s; if the field is named otherwise, add it to renamedKeys in this test", k, listName, typ.Name())
			}
		}
	}
	walk(reflect.ValueOf(*cfg), "", "Config.")
	if len(out) == 0 {
		t.Fatal("found no field in config.Config")
	}
	return out
}

// lowerFirst turns a Go name into the key the file uses for it, by the parser's
// convention: ProbeInterval is probeInterval.
func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// defaultIs reports whether the default a row gives, the text of a code span, is v; ok is
// false when the test cannot compare them.
func defaultIs(v reflect.Value, text string) (same, ok bool) {
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		d, err := time.ParseDuration(text)
		return err == nil && d == time.Duration(v.Int()), true
	}
	switch v.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		return err == nil && b == v.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		return err == nil && n == v.Int(), true
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(text, 64)
		return err == nil && x == v.Float(), true
	case reflect.String:
		return text == v.String(), true
	}
	return false, false
}

// TestCloudConfigFields checks the table of docs/configuration.md, "The cloud-config":
// one row for every field of the file, as the config package reads it, and none for
// anything else; and where a row gives a default as a value in backquotes, that it is the
// default a file that leaves the field out gets.
func TestCloudConfigFields(t *testing.T) {
	fields := configFields(t)
	for _, f := range fields {
		t.Logf("field %s (config.%s), default %v", f.path, f.goPath, f.value.Interface())
	}
	lines := readPage(t, configPage)
	sec, ok := section(lines, configSection)
	if !ok {
		t.Fatalf("%s has no section %q", configPage, configSection)
	}
	tb, ok := tableWith(sec, "field", "default")
	if !ok {
		t.Fatalf("%s, %s: no table with the columns field and default", configPage, configSection)
	}
	rows := make(map[string]row)
	for _, r := range tb.rows {
		names := code(r.cells[0])
		if len(names) != 1 {
			t.Errorf("%s:%d: a row of the cloud-config's fields must name one field in backquotes, as `failover.probeInterval`: %q", configPage, r.index+1, lines[r.index])
			continue
		}
		if other, ok := rows[names[0]]; ok {
			t.Errorf("%s:%d: field %s has a row already, at line %d; keep one", configPage, r.index+1, names[0], other.index+1)
			continue
		}
		rows[names[0]] = r
	}
	known := make(map[string]bool)
	for _, f := range fields {
		known[f.path] = true
		r, ok := rows[f.path]
		if !ok {
			t.Errorf("cloud-config field %s (config.%s) is not in the table of %s, %s: add a row with its default and meaning", f.path, f.goPath, configPage, configSection)
			continue
		}
		if def := code(r.cell(1)); len(def) == 1 && r.cell(1) == "`"+def[0]+"`" {
			if same, ok := defaultIs(f.value, def[0]); ok && !same {
				t.Errorf("%s:%d: the default of %s is %v (what config.Parse gives a file without it), the row says %s: fix the row", configPage, r.index+1, f.path, fmt.Sprint(f.value.Interface()), r.cell(1))
			}
		}
	}
	for _, r := range tb.rows {
		if names := code(r.cells[0]); len(names) == 1 && !known[names[0]] {
			t.Errorf("%s:%d: %s is no field of the cloud-config (config.Config has none such); remove the row or fix the name", configPage, r.index+1, names[0])
		}
	}
}
