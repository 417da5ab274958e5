package nodejs

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// Script is a node script a test talks to: it writes the script's input
// to Stdin and reads its lines from Stdout; Stderr keeps what the script
// printed there, logged when the test fails.
type Script struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
	Stderr *syncbuf.Buffer
}

// Start runs node script in dir under ctx, with env added to the test's
// environment and NODE_ENV=test.
func Start(ctx context.Context, t testing.TB, node, dir, script string, env ...string) *Script {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "NODE_ENV=test")
	s := &Script{Cmd: cmd, Stderr: &syncbuf.Buffer{}} // read on failure while the process may still write
	var err error
	if s.Stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.Stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = s.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s stderr:\n%s", script, s.Stderr.String())
		}
	})
	return s
}
