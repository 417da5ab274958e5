package procstack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries are the programs a Stack starts. A program other than the
// built one may stand in, as long as it serves from the same FUNDUQ_*
// environment (scripts/load runs its own binary as the broker node).
type Binaries struct {
	Broker string // serves a broker node (broker-node)
	Doors  string // serves the doors (functions/local)
}

// Build compiles broker-node and the local doors server into dir, without
// -race whatever the caller runs under: they are the system under test,
// not the test. It must run inside this module.
func Build(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Broker: filepath.Join(dir, "broker-node"), Doors: filepath.Join(dir, "doors-local")}
	gobin := goBinary()
	for _, t := range []struct{ out, pkg string }{
		{b.Broker, "github.com/funduq/funduq-go/broker-node"},
		{b.Doors, "github.com/funduq/funduq-go/functions/local"},
	} {
		out, err := exec.CommandContext(ctx, gobin, "build", "-o", t.out, t.pkg).CombinedOutput()
		if err != nil {
			return Binaries{}, &BuildError{Package: t.pkg, Output: string(out), Err: err}
		}
	}
	return b, nil
}

// goBinary prefers the toolchain running this program (go test and go run
// set GOROOT in the environment), then go on PATH.
func goBinary() string {
	if g := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		if _, err := os.Stat(g); err == nil {
			return g
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}
