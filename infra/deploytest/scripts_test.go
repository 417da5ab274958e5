package deploytest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runScript runs scripts/<name> with a clean environment (no AWS tools or
// credentials needed) and returns exit code, stdout and stderr.
func runScript(t *testing.T, name string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", name), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: %v", name, err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// Every deployment and maintenance script answers --help on stdout with exit status 0.
func TestScriptsHelp(t *testing.T) {
	for _, name := range []string{"build-lambdas", "build-broker", "deploy", "migrate", "lease", "fuzz", "vulncheck"} {
		code, out, errOut := runScript(t, name, nil, "--help")
		if code != 0 || !strings.Contains(out, "scripts/"+name) || errOut != "" {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
	// A subcommand's --help is the same help, not an error.
	for _, args := range [][]string{{"foundation", "--help"}, {"all", "--help"}, {"doors", "--stack-name", "s", "--help"}} {
		code, out, errOut := runScript(t, "deploy", nil, args...)
		if code != 0 || !strings.Contains(out, "scripts/deploy foundation") || errOut != "" {
			t.Errorf("deploy %v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if code, out, _ := runScript(t, "lease", nil, "status", "--help"); code != 0 || !strings.Contains(out, "scripts/lease handover") {
		t.Errorf("lease status --help: exit %d, stdout %q", code, out)
	}
}

// Every script refuses missing parameters with a message naming them, and
// before it needs any tool (sam, aws) or network.
func TestScriptsRefuseMissingParameters(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"deploy", nil, []string{"all", "foundation", "broker", "doors"}},
		{"deploy", []string{"nosuch"}, []string{"nosuch"}},
		{"deploy", []string{"foundation"}, []string{"--stack-name"}},
		{"deploy", []string{"all"}, []string{"--stack-prefix"}},
		{"deploy", []string{"all", "--stack-prefix", "p", "--stack-name", "x"}, []string{"--stack-prefix", "--stack-name"}},
		{"deploy", []string{"broker", "--foundation-stack", "f"}, []string{"--stack-name"}},
		{"deploy", []string{"doors", "--stack-name", "s", "--foundation-stack"}, []string{"--foundation-stack"}},
		{"deploy", []string{"foundation", "--stack-name", "s", "--bucket", "b"}, []string{"--bucket", "foundation"}},
		{"deploy", []string{"broker", "--stack-name", "s", "--subnet-ids", "a"}, []string{"--subnet-ids", "broker"}},
		{"deploy", []string{"doors"}, []string{"--stack-name", "--secret-arn", "--subnet-ids", "--security-group-id"}},
		{"deploy", []string{"doors", "--stack-name", "s", "--subnet-ids", "subnet-1"}, []string{"--secret-arn", "--security-group-id"}},
		{"deploy", []string{"broker"}, []string{"--stack-name", "--secret-arn", "--vpc-id", "--public-subnet-ids",
			"--private-subnet-ids", "--store-sg", "--bucket"}},
		{"deploy", []string{"doors", "--stack-name", "s", "--secret-arn", "plain", "--subnet-ids", "a", "--security-group-id", "sg"}, []string{"--secret-arn"}},
		{"deploy", []string{"doors", "--stack-name"}, []string{"--stack-name"}},
		{"deploy", []string{"broker", "--stack-name", "s", "--foundation-stack", "f", "--certificate-arn", "arn:aws:acm:x"}, []string{"--hostname"}},
		{"deploy", []string{"doors", "--stack-name", "s", "--foundation-stack", "f", "--jwks-url", "http://idp.example/jwks",
			"--jwt-issuer", "i", "--jwt-audience", "a"}, []string{"--jwks-url", "https://"}},
		{"migrate", nil, []string{"FUNDUQ_DATABASE_URL"}},
		{"lease", nil, []string{"status", "handover"}},
		{"lease", []string{"takeover"}, []string{"takeover"}},
		{"lease", []string{"status"}, []string{"FUNDUQ_DATABASE_URL", "FUNDUQ_REDIS_URL"}},
		{"build-lambdas", []string{"--out"}, []string{"--out"}},
		{"build-lambdas", []string{"nosuchdoor"}, []string{"nosuchdoor"}},
		{"build-broker", []string{"--out"}, []string{"--out"}},
		{"build-broker", []string{"--arch"}, []string{"--arch"}},
		{"build-broker", []string{"--arch", "mips"}, []string{"--arch", "mips"}},
	} {
		code, _, errOut := runScript(t, tc.name, nil, tc.args...)
		if code != 2 {
			t.Errorf("%s %v: exit %d, want 2; stderr %q", tc.name, tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s %v: stderr does not name %s: %q", tc.name, tc.args, w, errOut)
			}
		}
	}
}

// The lease wrapper hands the command's own exit status through: a typo in
// its flags is a usage error (2), as the command itself says, not the 1 of a
// failed `go run` with an "exit status 2" line of its own.
func TestLeaseScriptKeepsTheUsageExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker node")
	}
	env := []string{"FUNDUQ_DATABASE_URL=postgres://127.0.0.1:1/none", "FUNDUQ_REDIS_URL=redis://127.0.0.1:1"}
	// The go tool's caches, so the build reuses what the suite built.
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOTOOLCHAIN", "GOFLAGS", "GOPROXY"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	for _, args := range [][]string{{"status", "--bogus"}, {"handover", "--wait", "soon"}, {"status", "extra"}} {
		code, _, errOut := runScript(t, "lease", env, args...)
		if code != 2 || strings.Contains(errOut, "exit status") || !strings.Contains(errOut, strings.TrimLeft(args[len(args)-1], "-")) {
			t.Errorf("lease %v: exit %d, want 2 with the command's own refusal; stderr %q", args, code, errOut)
		}
	}
}
