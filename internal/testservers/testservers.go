// Package testservers starts private, throw-away PostgreSQL and Redis
// servers on free loopback ports, for tests and programs (the soak) that
// must take storage away — stop it, freeze it, start it again — without
// touching the shared servers every other test uses.
//
// PostgreSQL is Debian's server binaries (/usr/lib/postgresql/<ver>/bin, or
// FUNDUQ_PG_BINDIR, or initdb on PATH); as root they run as the postgres OS
// user, the way scripts/lib/services.sh runs them. Redis is redis-server on
// PATH, without persistence: a restarted Redis has lost everything, as a
// replaced cache node would have.
//
// StartPostgres and StartRedis return errors; PG and Redis are their test
// forms: they skip when the binaries are missing — or fail under CI=true —
// and tear the server down in t.Cleanup.
package testservers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrMissing wraps the error of a server whose binaries are not installed.
var ErrMissing = errors.New("server binaries not installed")

// bootWait bounds a server becoming ready (a hang guard).
const bootWait = 60 * time.Second

// FreePort returns a loopback TCP port nobody listens on now.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func isRoot() bool { return os.Geteuid() == 0 }

// ---------------------------------------------------------------- PostgreSQL

// Postgres is a private PostgreSQL cluster (trust auth, superuser postgres).
type Postgres struct {
	Port   int
	bindir string
	dir    string // owns data/ and the log
	data   string
	log    string
	uid    int
	gid    int

	mu      sync.Mutex
	running bool
	frozen  []int
}

// PGBinDir finds the PostgreSQL server binaries.
func PGBinDir() (string, error) {
	if d := os.Getenv("FUNDUQ_PG_BINDIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("FUNDUQ_PG_BINDIR=%s has no initdb: %w", d, ErrMissing)
		}
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return pgVersion(found[i]) < pgVersion(found[j]) })
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no initdb under /usr/lib/postgresql/*/bin or on PATH (apt-get install postgresql): %w", ErrMissing)
}

func pgVersion(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// StartPostgres initialises a cluster in a new temporary folder and starts
// it on a free loopback port.
func StartPostgres() (*Postgres, error) {
	bindir, err := PGBinDir()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "funduq-testpg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: temp folder: %w", err)
	}
	p := &Postgres{Port: port, bindir: bindir, dir: dir, data: filepath.Join(dir, "data"),
		log: filepath.Join(dir, "postgres.log"), uid: -1, gid: -1}
	if isRoot() {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: running as root needs the postgres OS user: %w", err)
		}
		p.uid, _ = strconv.Atoi(u.Uid)
		p.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, p.uid, p.gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres: chown %s: %w", dir, err)
		}
	}
	out, err := p.cmd(filepath.Join(bindir, "initdb"), "-D", p.data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = ''\n"+
		"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"+
		"shared_buffers = 16MB\n", port)
	f, err := os.OpenFile(filepath.Join(p.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		f.Close()
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: write postgresql.conf: %w", err)
	}
	if err := p.Start(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// cmd runs a PostgreSQL binary as the postgres user when we are root.
func (p *Postgres) cmd(bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.Dir = "/"
	if p.uid >= 0 {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.gid)}}
	}
	return c
}

// URL is the DSN of database db ("" is postgres) on this server.
func (p *Postgres) URL(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Start starts the server (again) on its port and waits until it accepts
// connections.
func (p *Postgres) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil
	}
	out, err := p.cmd(filepath.Join(p.bindir, "pg_ctl"), "start", "-D", p.data, "-l", p.log, "-w",
		"-t", strconv.Itoa(int(bootWait/time.Second)), "-s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("postgres: pg_ctl start on port %d: %w\n%s\n%s", p.Port, err, out, p.logTail())
	}
	p.running = true
	return nil
}

// Stop shuts the server down ("fast": open sessions are ended, as in a
// restart) and waits until it has exited. Clients get connection refused
// until Start.
func (p *Postgres) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return nil
	}
	p.thawLocked()
	out, err := p.cmd(filepath.Join(p.bindir, "pg_ctl"), "stop", "-D", p.data, "-m", "fast", "-w",
		"-t", strconv.Itoa(int(bootWait/time.Second)), "-s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("postgres: pg_ctl stop: %w\n%s", err, out)
	}
	p.running = false
	return nil
}

// Freeze stops every process of the cluster (SIGSTOP): connections are
// still accepted by the kernel, but nothing answers — a server hung, or a
// network dropping packets. Thaw undoes it.
func (p *Postgres) Freeze() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running || p.frozen != nil {
		return nil
	}
	pm, err := p.postmasterPID()
	if err != nil {
		return err
	}
	pids := append([]int{pm}, children(pm)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	p.frozen = pids
	return nil
}

// Thaw resumes a frozen cluster.
func (p *Postgres) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawLocked()
}

func (p *Postgres) thawLocked() {
	for _, pid := range p.frozen {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	p.frozen = nil
}

func (p *Postgres) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postgres: postmaster.pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("postgres: postmaster.pid: %w", err)
	}
	return pid, nil
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// Close stops the server and removes its folder.
func (p *Postgres) Close() {
	if err := p.Stop(); err != nil {
		// Last resort: the postmaster by its pid, never by name.
		if pid, perr := p.postmasterPID(); perr == nil {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	_ = os.RemoveAll(p.dir)
}

// Log is the server's log file.
func (p *Postgres) Log() string { return p.log }

func (p *Postgres) logTail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// CreateDatabase creates database name.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(p.bindir, "psql"), "-X", "-w", "-q", "-d", p.URL(""),
		"-c", fmt.Sprintf(`CREATE DATABASE %q`, name)).CombinedOutput()
	if err != nil {
		// psql lives in postgresql-client (/usr/bin) when not beside initdb.
		out2, err2 := exec.CommandContext(ctx, "psql", "-X", "-w", "-q", "-d", p.URL(""),
			"-c", fmt.Sprintf(`CREATE DATABASE %q`, name)).CombinedOutput()
		if err2 != nil {
			return fmt.Errorf("postgres: create database %s: %w\n%s\n%s", name, err2, out, out2)
		}
	}
	return nil
}

// ---------------------------------------------------------------- Redis

// Redis is a private redis-server without persistence.
type Redis struct {
	Port int
	bin  string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port.
func StartRedis() (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server on PATH (apt-get install redis-server): %w", ErrMissing)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "funduq-testredis-")
	if err != nil {
		return nil, fmt.Errorf("redis: temp folder: %w", err)
	}
	r := &Redis{Port: port, bin: bin, dir: dir}
	if err := r.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// URL is the server's redis:// URL (database 0).
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Start starts the server (again, empty) on its port and waits until it
// answers PING.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redis: log: %w", err)
	}
	c := exec.Command(r.bin, "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", r.dir, "--daemonize", "no")
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("redis: start: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); logf.Close(); close(done) }()
	deadline := time.Now().Add(bootWait)
	for !redisPing(r.Port) {
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("redis: exited while starting on port %d:\n%s", r.Port, b)
		default:
		}
		if time.Now().After(deadline) {
			_ = c.Process.Kill()
			<-done
			return fmt.Errorf("redis: no PONG on port %d within %v", r.Port, bootWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.cmd, r.done = c, done
	return nil
}

// redisPing speaks just enough RESP to see a PONG.
func redisPing(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 16)
	n, _ := c.Read(buf)
	return strings.HasPrefix(string(buf[:n]), "+PONG")
}

// Freeze stops the server process (SIGSTOP): connections are accepted and
// commands sent, and nothing is answered — a hung server, or a partition
// that drops packets. Thaw resumes it.
func (r *Redis) Freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Thaw resumes a frozen server.
func (r *Redis) Thaw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Stop ends the server (SIGTERM, then SIGKILL) and waits until it exited.
func (r *Redis) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a frozen server cannot act on SIGTERM
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd, r.done = nil, nil
	return nil
}

// Close stops the server and removes its folder.
func (r *Redis) Close() {
	_ = r.Stop()
	_ = os.RemoveAll(r.dir)
}
