// Package nodejs finds Node.js for the tests that drive funduq with
// official JavaScript clients (and providers written from the wire
// description), and installs a test folder's npm packages. Without node or
// npm such a test is skipped, except under CI=true, where it must run and
// fails instead.
package nodejs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Require returns the path of the program name (node, npm), skipping t
// without it — or failing t under CI=true.
func Require(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", name, err)
		}
		t.Skipf("%s not found (%v): this test needs Node 20 and npm", name, err)
	}
	return p
}

// Project returns node and the absolute path of dir with its npm packages
// installed: npm ci runs (once, from the lock file) only when the package
// pkg is missing from dir/node_modules. Tests of several packages (go test
// runs them as processes side by side) and parallel tests share a folder,
// and npm ci empties node_modules before it installs: so the look and the
// install hold an exclusive lock on the folder, and whoever comes second
// finds the packages there rather than removing them from under a running
// script.
func Project(t testing.TB, dir, pkg string) (node, abs string) {
	t.Helper()
	node = Require(t, "node")
	npm := Require(t, "npm")
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "funduq-npm-"+hex.EncodeToString(sum[:8])+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close() // and with it the lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatalf("lock %s's npm packages: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", pkg, "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = abs
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return node, abs
}
