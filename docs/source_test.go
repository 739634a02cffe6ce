package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// goPackage is the non-test Go source of one directory of the module.
type goPackage struct {
	dir   string // from the module root, slash-separated
	path  string // import path
	files []*goFile
	// consts are the package-level string constants, by name.
	consts map[string]string
}

type goFile struct {
	name string // from the module root, slash-separated
	ast  *ast.File
	// imports maps the names a file uses for its imports to their paths.
	imports map[string]string
}

// fset holds the positions of every file parsed, named by their path from the module root
// so that messages name them as a reader finds them.
var fset = token.NewFileSet()

var (
	parseOnce sync.Once
	parsed    map[string]*goPackage // by import path
	parseErr  error
)

// sourceSkip are the top-level directories whose code is no part of the programs: tools,
// the tests that drive the binaries, and this package.
var sourceSkip = map[string]bool{"hack": true, "test": true, "docs": true}

// modulePackages returns the module's packages, by import path, parsed once per run.
func modulePackages(t *testing.T) map[string]*goPackage {
	t.Helper()
	parseOnce.Do(func() { parsed, parseErr = parseModule() })
	if parseErr != nil {
		t.Fatal(parseErr)
	}
	return parsed
}

func parseModule() (map[string]*goPackage, error) {
	mod, err := modulePath()
	if err != nil {
		return nil, err
	}
	pkgs := make(map[string]*goPackage)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (sourceSkip[rel] || base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := path.Dir(rel)
		imp := mod
		if dir != "." {
			imp = mod + "/" + dir
		}
		pkg := pkgs[imp]
		if pkg == nil {
			pkg = &goPackage{dir: dir, path: imp, consts: make(map[string]string)}
			pkgs[imp] = pkg
		}
		gf := &goFile{name: rel, ast: f, imports: make(map[string]string)}
		for _, is := range f.Imports {
			ip, _ := strconv.Unquote(is.Path.Value)
			name := path.Base(ip)
			if is.Name != nil {
				name = is.Name.Name
			}
			gf.imports[name] = ip
		}
		pkg.files = append(pkg.files, gf)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Constants may be made of others, of this package or another: evaluate until
	// nothing more can be.
	for progress := true; progress; {
		progress = false
		for _, pkg := range pkgs {
			for _, f := range pkg.files {
				for _, decl := range f.ast.Decls {
					gd, ok := decl.(*ast.GenDecl)
					if !ok || gd.Tok != token.CONST {
						continue
					}
					for _, spec := range gd.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if _, done := pkg.consts[name.Name]; done || i >= len(vs.Values) {
								continue
							}
							if s, ok := (scope{pkgs, pkg, f}).str(vs.Values[i]); ok {
								pkg.consts[name.Name] = s
								progress = true
							}
						}
					}
				}
			}
		}
	}
	return pkgs, nil
}

// modulePath reads the module's path from go.mod.
func modulePath() (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", os.ErrNotExist
}

// packagesUnder returns the packages in dir or below it, in the order of their paths.
func packagesUnder(pkgs map[string]*goPackage, dir string) []*goPackage {
	var out []*goPackage
	for _, p := range pkgs {
		if p.dir == dir || strings.HasPrefix(p.dir, dir+"/") {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// scope is where an expression is read: for the constants it may name.
type scope struct {
	pkgs map[string]*goPackage
	pkg  *goPackage
	file *goFile
}

// str returns the value of a string expression made of literals and constants of the
// module, and whether it is one.
func (s scope) str(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(e.Value)
		return v, err == nil
	case *ast.ParenExpr:
		return s.str(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok := s.str(e.X)
		if !ok {
			return "", false
		}
		y, ok := s.str(e.Y)
		return x + y, ok
	case *ast.Ident:
		v, ok := s.pkg.consts[e.Name]
		return v, ok
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return "", false
		}
		if other := s.pkgs[s.file.imports[x.Name]]; other != nil {
			v, ok := other.consts[e.Sel.Name]
			return v, ok
		}
	}
	return "", false
}

// isPkg reports whether e is the name file gives the import path.
func (f *goFile) isPkg(e ast.Expr, importPath string) bool {
	id, ok := e.(*ast.Ident)
	return ok && f.imports[id.Name] == importPath
}

// pos returns "file:line" of n.
func pos(n ast.Node) string {
	p := fset.Position(n.Pos())
	return p.Filename + ":" + strconv.Itoa(p.Line)
}
