// Package scripts holds the end-to-end test of scripts/dev-up; the folder's
// real content is the shell scripts beside this file.
//
// The test runs only when FUNDUQ_TEST_DEVUP=1 (scripts/test sets it) or
// CI=true: it starts real PostgreSQL and Redis servers and builds the
// project's programs, which takes a while.
package scripts

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.Main(m)
}

const (
	// readyPrefix starts the last line of dev-up's summary.
	readyPrefix = "[funduq] ready:"
	// readyTimeout and stopTimeout are guards against a hang, not timing
	// assertions: a first run builds the programs and runs initdb, which on a
	// busy machine may take minutes.
	readyTimeout = 5 * time.Minute
	stopTimeout  = 2 * time.Minute
)

func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("FUNDUQ_TEST_DEVUP") != "1" && os.Getenv("CI") != "true" {
		t.Skip("end-to-end test of scripts/dev-up; set FUNDUQ_TEST_DEVUP=1 to run it (scripts/test does)")
	}
}

// TestDevUpStartsAndStopsItsOwnServers runs dev-up twice in a row with no
// database or Redis given, so that it starts its own, and checks that each
// Ctrl-C leaves nothing behind.
func TestDevUpStartsAndStopsItsOwnServers(t *testing.T) {
	skipUnlessEnabled(t)
	s := newStack(t)

	var outputs []string
	for run := 1; run <= 2; run++ {
		out := s.run(t, s.env(), nil)
		outputs = append(outputs, out)
		for _, want := range []string{
			"starting PostgreSQL on 127.0.0.1:" + strconv.Itoa(s.pgPort),
			"starting Redis on 127.0.0.1:" + strconv.Itoa(s.redisPort),
			"stopping PostgreSQL",
			"stopping Redis",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("run %d: dev-up never said %q", run, want)
			}
		}
		s.assertNothingLeft(t)
		if t.Failed() {
			t.Fatalf("run %d failed; not going on", run)
		}
	}
	// The second run found the data folder made by the first.
	const initMsg = "initialising a PostgreSQL data folder"
	if !strings.Contains(outputs[0], initMsg) || strings.Contains(outputs[1], initMsg) {
		t.Errorf("want initdb in the first run only; first run ran it: %v, second run: %v",
			strings.Contains(outputs[0], initMsg), strings.Contains(outputs[1], initMsg))
	}
}

// TestDevUpReusesRunningServers gives dev-up the test servers through
// FUNDUQ_DATABASE_URL and FUNDUQ_REDIS_URL: it must use them, start no
// server of its own, and stop cleanly.
func TestDevUpReusesRunningServers(t *testing.T) {
	skipUnlessEnabled(t)
	dbURL := envOr("FUNDUQ_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	redisURL := envOr("FUNDUQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

	// The programs dev-up starts share these servers with other tests
	// running at the same time: give them a database of their own (dev-up
	// runs the migrations into it) and a Redis key and channel prefix of
	// their own (the lease, the roster).
	scratchURL := scratchDatabase(t, dbURL)
	prefix := fmt.Sprintf("devuptest-%d-%d:", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, prefix) })

	s := newStack(t)
	env := s.env("FUNDUQ_DATABASE_URL="+scratchURL, "FUNDUQ_REDIS_URL="+redisURL, "FUNDUQ_REDIS_PREFIX="+prefix)
	out := s.run(t, env, func() {
		// While it runs: none of its own servers.
		for _, port := range []int{s.pgPort, s.redisPort} {
			if listening(port) {
				t.Errorf("port %d (FUNDUQ_DEV_PG_PORT/FUNDUQ_DEV_REDIS_PORT) is open: dev-up started a server of its own", port)
			}
		}
		for _, dir := range []string{"pg", "redis"} {
			if _, err := os.Stat(filepath.Join(s.stateDir, dir)); err == nil {
				t.Errorf("dev-up made %s in its state folder: it started a server of its own", dir)
			}
		}
		// README: a second broker node for a failover is started from
		// dev.env with a FUNDUQ_HTTP_ADDR of its own. dev.env must not pin
		// the first node's URL as FUNDUQ_ADVERTISE_URL, or that node, once
		// it leads, names the first node to every provider, which then
		// dials a standby for ever.
		script := `source "$1" && FUNDUQ_HTTP_ADDR=127.0.0.1:1 && printf %s "${FUNDUQ_ADVERTISE_URL-}"`
		got, err := exec.Command("bash", "-c", script, "bash", filepath.Join(s.stateDir, "dev.env")).Output()
		if err != nil {
			t.Errorf("sourcing dev.env: %v", err)
		} else if len(got) != 0 {
			t.Errorf("dev.env sets FUNDUQ_ADVERTISE_URL=%s though it was not given: a second node started from it with its own FUNDUQ_HTTP_ADDR would advertise the first node's URL", got)
		}
		// The chat page and the operator console (its login form) answer.
		for _, u := range []string{fmt.Sprintf("http://127.0.0.1:%d/chat", s.doorsPort),
			fmt.Sprintf("http://127.0.0.1:%d/console", s.httpPort)} {
			resp, err := http.Get(u)
			if err != nil {
				t.Errorf("GET %s: %v", u, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("GET %s: %d", u, resp.StatusCode)
			}
		}
	})
	for _, want := range []string{fmt.Sprintf("http://127.0.0.1:%d/chat", s.doorsPort),
		fmt.Sprintf("http://127.0.0.1:%d/console", s.httpPort), "secrets/console-token"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev-up's summary does not name %q", want)
		}
	}
	for _, want := range []string{"using the PostgreSQL at", "using the Redis at"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev-up never said %q", want)
		}
	}
	for _, unwanted := range []string{"starting PostgreSQL", "starting Redis", "stopping PostgreSQL", "stopping Redis"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("dev-up said %q though it was given running servers", unwanted)
		}
	}
	s.assertNothingLeft(t)
	// The servers it was given still run.
	if err := psql(dbURL, "select 1"); err != nil {
		t.Errorf("the PostgreSQL dev-up was given no longer answers: %v", err)
	}
}

// stack is one dev-up set-up: a state folder and free ports.
type stack struct {
	root                                   string // the repository
	stateDir                               string
	pgPort, redisPort, httpPort, doorsPort int
}

func newStack(t *testing.T) *stack {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "dev-up")); err != nil {
		t.Fatalf("scripts/dev-up: %v", err)
	}
	dir := t.TempDir()
	// The local PostgreSQL runs as the postgres OS user, which must be able
	// to enter the state folder; t.TempDir makes its folders 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 4)
	s := &stack{root: root, stateDir: dir, pgPort: ports[0], redisPort: ports[1], httpPort: ports[2], doorsPort: ports[3]}
	// Registered after t.TempDir, so it runs before the folder is removed: a
	// failed test must not leave servers running from it.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		cmd := exec.Command(filepath.Join(root, "scripts", "dev-up"), "--stop")
		cmd.Env = s.env()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("scripts/dev-up --stop: %v\n%s", err, out)
		}
	})
	return s
}

func (s *stack) ports() []int { return []int{s.pgPort, s.redisPort, s.httpPort, s.doorsPort} }

// env is the test's environment without any FUNDUQ_ setting, plus the
// stack's state folder and ports, plus extra.
func (s *stack) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FUNDUQ_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"FUNDUQ_STATE_DIR="+s.stateDir,
		"FUNDUQ_DEV_PG_PORT="+strconv.Itoa(s.pgPort),
		"FUNDUQ_DEV_REDIS_PORT="+strconv.Itoa(s.redisPort),
		"FUNDUQ_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(s.httpPort),
		"FUNDUQ_DOORS_ADDR=127.0.0.1:"+strconv.Itoa(s.doorsPort),
	)
	return append(env, extra...)
}

// run starts scripts/dev-up, waits for its ready line, calls whileUp (if
// any), then sends SIGINT to its process group as a terminal's Ctrl-C would
// and waits for it to exit, which must be with status 0. It returns all
// that dev-up printed.
func (s *stack) run(t *testing.T, env []string, whileUp func()) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.root, "scripts", "dev-up"))
	cmd.Dir = s.root
	cmd.Env = env
	// A group of its own: the SIGINT reaches dev-up and its children as
	// from a terminal, and a child left behind can be found by its group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatalf("starting scripts/dev-up: %v", err)
	}
	pgid := cmd.Process.Pid

	var (
		mu  sync.Mutex
		out strings.Builder
	)
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	ready := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		seen := false
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			out.WriteString(line + "\n")
			mu.Unlock()
			if !seen && strings.HasPrefix(line, readyPrefix) {
				seen = true
				close(ready)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	defer func() {
		if t.Failed() {
			t.Logf("scripts/dev-up printed:\n%s", output())
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var waitErr error
	done := false
	select {
	case <-ready:
		if whileUp != nil {
			whileUp()
		}
	case waitErr = <-exited:
		done = true
		t.Errorf("scripts/dev-up exited before it was ready: %v", waitErr)
	case <-ctx.Done():
		t.Errorf("scripts/dev-up printed no %q line within %v", readyPrefix, readyTimeout)
	}
	if !done {
		if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
			t.Errorf("SIGINT to dev-up's process group: %v", err)
		}
		select {
		case waitErr = <-exited:
		case <-time.After(stopTimeout):
			t.Errorf("scripts/dev-up did not exit within %v of SIGINT; killing its process group", stopTimeout)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			waitErr = <-exited
		}
		if waitErr != nil {
			t.Errorf("scripts/dev-up after SIGINT: %v; want exit status 0", waitErr)
		}
	}

	// Everything that inherited dev-up's output has exited once the pipe
	// reaches its end.
	select {
	case <-readerDone:
	case <-time.After(30 * time.Second):
		t.Errorf("a process still holds scripts/dev-up's output open after dev-up exited")
		r.Close() // ends the reader
		<-readerDone
	}
	for _, pid := range groupMembers(pgid) {
		t.Errorf("process %d of dev-up's process group outlived it: %s", pid, cmdline(pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return output()
}

// assertNothingLeft checks that no process mentions the state folder on its
// command line and that nothing listens on the stack's ports.
func (s *stack) assertNothingLeft(t *testing.T) {
	t.Helper()
	for _, port := range s.ports() {
		if listening(port) {
			t.Errorf("something still listens on 127.0.0.1:%d", port)
		}
	}
	for _, pid := range processes() {
		if pid == os.Getpid() {
			continue
		}
		if c := cmdline(pid); strings.Contains(c, s.stateDir) {
			t.Errorf("process %d is left running: %s", pid, c)
		}
	}
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 just now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func listening(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// processes lists the pids in /proc.
func processes() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cmdline is a process's command line with spaces between the arguments.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// groupMembers lists the live (not zombie) processes of process group pgid.
func groupMembers(pgid int) []int {
	var pids []int
	for _, pid := range processes() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the parenthesised command name: state, ppid, pgrp, ...
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// psql runs one SQL command against dsn.
func psql(dsn, sql string) error {
	out, err := exec.Command("psql", "-X", "-w", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("psql -c %q: %w: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// scratchDatabase creates a database on the server of dsn, dropped when the
// test ends, and returns its URL.
func scratchDatabase(t *testing.T, dsn string) string {
	t.Helper()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("psql is needed (scripts/test installs it): %v", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("FUNDUQ_TEST_DATABASE_URL: %v", err)
	}
	name := fmt.Sprintf("funduq_devup_%d_%d", os.Getpid(), time.Now().UnixNano())
	if err := psql(dsn, "create database "+name); err != nil {
		t.Fatalf("FUNDUQ_TEST_DATABASE_URL must reach a PostgreSQL superuser (scripts/test arranges one): %v", err)
	}
	t.Cleanup(func() {
		if err := psql(dsn, "drop database if exists "+name+" with (force)"); err != nil {
			t.Errorf("dropping the scratch database: %v", err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// deleteRedisKeys removes the keys under prefix that the programs left in
// the shared Redis (best effort: the lease key would expire anyway).
func deleteRedisKeys(t *testing.T, redisURL, prefix string) {
	t.Helper()
	out, err := exec.Command("redis-cli", "--no-auth-warning", "-u", redisURL, "--scan", "--pattern", prefix+"*").Output()
	if err != nil {
		t.Logf("listing the test's Redis keys: %v", err)
		return
	}
	keys := strings.Fields(string(out))
	if len(keys) == 0 {
		return
	}
	args := append([]string{"--no-auth-warning", "-u", redisURL, "del"}, keys...)
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Logf("deleting the test's Redis keys: %v: %s", err, out)
	}
}
