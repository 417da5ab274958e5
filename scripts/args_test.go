package scripts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A mistyped number (or flag) on a script's command line is refused before
// anything starts, with exit status 2 and the flag named, instead of running
// with an empty or shifted setting (scripts/chaos --seeds 4..6 once ran no
// seed at all and reported a failure of the chaos test; scripts/dev-up
// --chek printed its usage without saying what was wrong).
func TestScriptsRefuseMistypedNumbers(t *testing.T) {
	for _, tc := range []struct {
		script string
		args   []string
		flag   string
	}{
		{"chaos", []string{"--seeds", "4..6"}, "--seeds"},
		{"chaos", []string{"--seeds"}, "--seeds"},
		{"chaos", []string{"--seeds", "0"}, "--seeds"},
		{"chaos", []string{"--from", "x", "--seeds", "2"}, "--from"},
		{"chaos", []string{"--seed", "x"}, "--seed"},
		{"chaos", []string{"--seed", "3", "--runs", "0"}, "--runs"},
		{"chaos", []string{"--runs", "-1"}, "--runs"},
		{"fuzz", []string{"--time"}, "--time"},
		{"dev-up", []string{"--chek"}, "--chek"},
	} {
		t.Run(tc.script+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			// The guard is against a script that starts its work anyway:
			// a refusal takes no time at all.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "./"+tc.script, tc.args...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.flag) {
				t.Errorf("the refusal does not name %s:\n%s", tc.flag, out)
			}
			if strings.Contains(string(out), "go test") || strings.Contains(string(out), "=== RUN") {
				t.Errorf("the script started its work:\n%s", out)
			}
		})
	}
}

// A newcomer with scripts/dev-up running who types scripts/lease status in
// another shell is told where the stack's settings are, instead of only
// which variables are missing.
func TestLeaseNamesTheDevStacksSettings(t *testing.T) {
	state := t.TempDir()
	env := filepath.Join(state, "dev.env")
	if err := os.WriteFile(env, []byte("export FUNDUQ_DATABASE_URL=postgres://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./lease", "status")
	cmd.Env = append(withoutFunduqEnv(os.Environ()), "FUNDUQ_STATE_DIR="+state)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
	}
	if want := "source " + env; !strings.Contains(string(out), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, out)
	}
}

// So is one who types scripts/migrate there (the README's way to migrate
// by hand).
func TestMigrateNamesTheDevStacksSettings(t *testing.T) {
	state := t.TempDir()
	env := filepath.Join(state, "dev.env")
	if err := os.WriteFile(env, []byte("export FUNDUQ_DATABASE_URL=postgres://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./migrate")
	cmd.Env = append(withoutFunduqEnv(os.Environ()), "FUNDUQ_STATE_DIR="+state)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2; output:\n%s", err, out)
	}
	if want := "source " + env; !strings.Contains(string(out), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, out)
	}
}

// withoutFunduqEnv is env less every FUNDUQ_ variable.
func withoutFunduqEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FUNDUQ_") {
			out = append(out, kv)
		}
	}
	return out
}

// A newcomer who points FUNDUQ_DATABASE_URL at a running PostgreSQL but
// names a database that does not exist there (a typo, or one not created
// yet) is told so, and dev-up stops: it used to call that server "not
// reachable" and start (even apt-get install) a project-local one instead.
func TestDevUpNamesAMissingDatabase(t *testing.T) {
	server := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if u := os.Getenv("FUNDUQ_TEST_DATABASE_URL"); u != "" {
		server = u
	}
	if err := exec.Command("psql", "-X", "-w", "-At", "-d", server, "-c", "select 1").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no PostgreSQL at %s: %v", server, err)
		}
		t.Skipf("no PostgreSQL at %s: %v", server, err)
	}
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	missing := fmt.Sprintf("devup_missing_%d", time.Now().UnixNano())
	u.Path = "/" + missing
	state := t.TempDir()
	ports := freePorts(t, 2)
	cmd := exec.Command("./dev-up", "--check")
	cmd.Env = append(withoutFunduqEnv(os.Environ()), "FUNDUQ_STATE_DIR="+state, "FUNDUQ_DATABASE_URL="+u.String(),
		"FUNDUQ_DEV_PG_PORT="+strconv.Itoa(ports[0]), "FUNDUQ_DEV_REDIS_PORT="+strconv.Itoa(ports[1]))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read until dev-up ends or turns to a server of its own; in that case
	// stop it (SIGINT: it stops what it started) before failing.
	var out strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "using a project-local PostgreSQL instead") {
			_ = cmd.Process.Signal(os.Interrupt)
			_, _ = io.Copy(io.Discard, stderr)
			break
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("exit: %v, want a failure", err)
	}
	if !strings.Contains(out.String(), `"`+missing+`" does not exist`) {
		t.Errorf("dev-up does not say the database does not exist:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(state, "pg")); err == nil {
		t.Errorf("dev-up made a PostgreSQL of its own:\n%s", out.String())
	}
}

// scripts/test -h and --help print its usage and exit 0 without starting
// anything: it used to pass --help on to go test, after installing
// chromium with apt-get when it was missing, and so set about the whole
// suite. A stand-in go on PATH tells whether it was reached.
func TestTestScriptAnswersHelp(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\necho 'stand-in go ran:' \"$@\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"--help", "-h"} {
		t.Run(arg, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "./test", arg)
			cmd.Env = append(withoutFunduqEnv(os.Environ()), "PATH="+bin+":"+os.Getenv("PATH"),
				"FUNDUQ_TEST_CHROMIUM=/bin/true", "FUNDUQ_TEST_FUZZTIME=0", "FUNDUQ_STATE_DIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil || strings.Contains(string(out), "stand-in go ran") || !strings.Contains(string(out), "scripts/test [go test flags") {
				t.Fatalf("exit: %v; want 0 with the usage and go never run; output:\n%s", err, out)
			}
		})
	}
}

// scripts/lease and scripts/migrate build with go.mod's toolchain line, as
// the README says every script does (its standard library has the security
// fixes govulncheck asks for): they ran the machine's Go as it was, so on a
// machine defaulting to GOTOOLCHAIN=local the operator's lease and migrate
// commands were built with an older patch release than the nodes
// scripts/dev-up builds. FUNDUQ_GOTOOLCHAIN still overrides. A stand-in go
// on PATH records the GOTOOLCHAIN it was run under.
func TestLeaseAndMigrateBuildWithTheToolchainLine(t *testing.T) {
	for _, tc := range []struct {
		script   string
		args     []string
		override string
		want     string
	}{
		{"lease", []string{"status"}, "", "auto"},
		{"migrate", nil, "", "auto"},
		{"lease", []string{"status"}, "local", "local"},
		{"migrate", nil, "local", "local"},
	} {
		t.Run(tc.script+" FUNDUQ_GOTOOLCHAIN="+tc.override, func(t *testing.T) {
			bin := t.TempDir()
			seen := filepath.Join(bin, "seen")
			if err := os.WriteFile(filepath.Join(bin, "go"),
				[]byte("#!/bin/sh\nprintf '%s' \"$GOTOOLCHAIN\" > "+seen+"\nexit 3\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "./"+tc.script, tc.args...)
			// /usr/local/go/bin named after the stand-in keeps the scripts
			// from putting the real go first.
			cmd.Env = append(withoutFunduqEnv(os.Environ()), "PATH="+bin+":/usr/local/go/bin:"+os.Getenv("PATH"),
				"GOTOOLCHAIN=local", "FUNDUQ_DATABASE_URL=postgres://x", "FUNDUQ_REDIS_URL=redis://x",
				"XDG_CACHE_HOME="+t.TempDir())
			if tc.override != "" {
				cmd.Env = append(cmd.Env, "FUNDUQ_GOTOOLCHAIN="+tc.override)
			}
			out, _ := cmd.CombinedOutput()
			got, err := os.ReadFile(seen)
			if err != nil {
				t.Fatalf("the stand-in go was not run: %v; output:\n%s", err, out)
			}
			if string(got) != tc.want {
				t.Errorf("go ran under GOTOOLCHAIN=%q, want %q", got, tc.want)
			}
		})
	}
}
