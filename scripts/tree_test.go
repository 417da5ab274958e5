package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// No built binary is committed: a stray `go build ./examples/echo-agent`
// at the repository's root once put a 10 MB executable in a commit, which
// every clone then carries for good. .gitignore names the usual outputs;
// this catches the ones it does not.
func TestNoBuiltBinaryIsCommitted(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	magic := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z'}}
	for _, name := range bytes.Split(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
		f, err := os.Open(filepath.Join(root, string(name)))
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		for _, m := range magic {
			if n >= len(m) && bytes.Equal(head[:len(m)], m) {
				t.Errorf("%s is a built executable: remove it from the repository (and add it to .gitignore)", name)
			}
		}
	}
}
