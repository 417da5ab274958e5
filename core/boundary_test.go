// Package core_test checks the rules every package under core/ keeps: it is
// shared by the doors and the broker, so it imports neither, and it reads no
// environment — configuration is parsed at each binary's edge and passed in.
package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/funduq/funduq-go"

func TestCoreImportsNoDoorOrBroker(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list gave %d packages; the check would prove nothing", len(deps))
	}
	for _, p := range deps {
		for _, banned := range []string{module + "/functions", module + "/broker-node"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("core depends on %s", p)
			}
		}
	}
}

// banned lists, per import path, the functions that read or change the
// process environment.
var banned = map[string][]string{
	"os":                          {"Getenv", "LookupEnv", "Environ", "Setenv", "Unsetenv", "Clearenv", "ExpandEnv"},
	"syscall":                     {"Getenv", "Environ", "Setenv", "Unsetenv", "Clearenv"},
	"github.com/caarlos0/env/v11": {"Parse", "ParseAs", "Must"},
}

func TestCoreReadsNoEnvironment(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Test-support packages (storetest and the like) exist to read
			// the test environment; only tests import them.
			if strings.HasSuffix(d.Name(), "test") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		names := map[string]string{} // local name → import path
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasSuffix(p, "test") && strings.HasPrefix(p, module) {
				t.Errorf("%s imports the test-support package %s", path, p)
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if p == "github.com/caarlos0/env/v11" {
				name = "env"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			for _, fn := range banned[names[x.Name]] {
				if sel.Sel.Name == fn {
					t.Errorf("%s: %s.%s touches the process environment", fset.Position(sel.Pos()), x.Name, fn)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}
