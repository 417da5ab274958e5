package nodejs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/internal/nodejs"
)

// Tests of several packages (go test runs them as processes side by side)
// and parallel tests of one share an e2e folder's packages. On a clean
// checkout each found them missing and ran npm ci, which empties
// node_modules first: one test's script then failed with
// ERR_MODULE_NOT_FOUND while another's install ran. Project installs once,
// the others waiting for it and finding the packages there. An npm of the
// test's own stands in for the real one: it notes each run, and an overlap.
func TestProjectInstallsOnceWhenAskedAtOnce(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found")
	}
	bin, dir := t.TempDir(), t.TempDir()
	npm := `#!/bin/sh
if [ -e running ]; then echo overlap >> runs; fi
touch running
echo run >> runs
sleep 0.3
mkdir -p node_modules/pkg && echo '{}' > node_modules/pkg/package.json
rm -f running
`
	if err := os.WriteFile(filepath.Join(bin, "npm"), []byte(npm), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(node, filepath.Join(bin, "node")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodejs.Project(t, dir, "pkg")
		}()
	}
	wg.Wait()
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(runs)); len(got) != 1 {
		t.Fatalf("npm ran %v for four tests asking at once; want one run", got)
	}
}
