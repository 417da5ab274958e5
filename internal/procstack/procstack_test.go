package procstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/provider"
)

// helperEnv makes the test binary a stand-in process: "serve" answers
// /livez, /health and /readyz (role from FUNDUQ_TEST_ROLE) on
// FUNDUQ_HTTP_ADDR until SIGTERM (exit 0); "exit" exits 3 at once.
const helperEnv = "PROCSTACK_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "serve":
		os.Exit(serveHelper())
	case "exit":
		os.Exit(3)
	}
	leaktest.Main(m)
}

func serveHelper() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", os.Getenv("FUNDUQ_HTTP_ADDR"))
	if err != nil {
		return 1
	}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {}
	mux.HandleFunc("/livez", ok)
	mux.HandleFunc("/health", ok)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		role := os.Getenv("FUNDUQ_TEST_ROLE")
		if role != "leader" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(Readyz{Role: role, Node: os.Getenv("FUNDUQ_NODE_ID")})
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	os.Stdout.WriteString("serving as " + os.Getenv("FUNDUQ_NODE_ID") + "\n")
	<-ctx.Done()
	_ = srv.Close()
	return 0
}

func testConfig(t *testing.T) Config {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Binaries:    Binaries{Broker: self},
		DatabaseURL: "postgres://postgres@127.0.0.1:5432/none", RedisURL: "redis://127.0.0.1:6379/0",
		RedisPrefix: "procstack-test:", IdentityKey: strings.Repeat("ab", 32), TokenSecret: strings.Repeat("s", 32),
		Env: []string{helperEnv + "=serve"}, LogDir: t.TempDir(), StopGrace: DefaultBoot,
	}
}

func newStack(t *testing.T, c Config) *Stack {
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for field, spoil := range map[string]func(*Config){
		"Binaries":                    func(c *Config) { c.Binaries = Binaries{} },
		"Binaries.Broker":             func(c *Config) { c.Binaries.Broker = "/nonexistent/broker" },
		"DatabaseURL":                 func(c *Config) { c.DatabaseURL = "mysql://x" },
		"RedisURL":                    func(c *Config) { c.RedisURL = "" },
		"RedisPrefix":                 func(c *Config) { c.RedisPrefix = "" },
		"IdentityKey":                 func(c *Config) { c.IdentityKey = "abcd" },
		"TokenSecret":                 func(c *Config) { c.TokenSecret = "" },
		"Env":                         func(c *Config) { c.Env = []string{"NOEQUALS"} },
		"LogDir":                      func(c *Config) { c.LogDir = "/nonexistent/logs" },
		"Boot/ProbeTimeout/StopGrace": func(c *Config) { c.StopGrace = -1 },
	} {
		c := testConfig(t)
		spoil(&c)
		_, err := New(c)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s spoiled: got %v, want a *ConfigError on %s", field, err, field)
		}
	}
	if err := testConfig(t).Validate(); err != nil {
		t.Fatalf("the good config: %v", err)
	}
}

func TestBrokerStartsIsKilledAndRestartsAsNextIncarnation(t *testing.T) {
	s := newStack(t, testConfig(t))
	ctx := context.Background()
	p, err := s.StartBroker(ctx, "n1", "FUNDUQ_TEST_ROLE=leader")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s.WaitLeader(ctx); err != nil || l != p {
		t.Fatalf("leader %v, %v; want n1", l, err)
	}
	if _, err := s.StartBroker(ctx, "n1"); err == nil {
		t.Fatal("a second live n1 was started")
	}
	if _, err := s.Restart(ctx, p); !errors.Is(err, ErrRunning) {
		t.Fatalf("restart of a live process: %v, want ErrRunning", err)
	}
	if err := p.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Alive() || p.ExitCode() != -1 {
		t.Fatalf("after SIGKILL: alive %v exit %d", p.Alive(), p.ExitCode())
	}
	q, err := s.Restart(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if q.Incarnation != 2 || q.String() != "n1#2" || !strings.HasSuffix(q.LogPath, "n1.2.log") || q.URL == p.URL {
		t.Fatalf("restarted as %s at %s logging to %s", q, q.URL, q.LogPath)
	}
	if cur := s.Of(KindBroker); len(cur) != 1 || cur[0] != q || len(s.Procs()) != 2 {
		t.Fatalf("current brokers %v, all %v", cur, s.Procs())
	}
	if !strings.Contains(p.Log(), "serving as n1") || p.Grep("serving") == "" || p.Tail(1) != "serving as n1" {
		t.Fatalf("the first incarnation's log: %q", p.Log())
	}
	if err := q.Term(ctx); err != nil || q.ExitCode() != 0 {
		t.Fatalf("SIGTERM: %v, exit %d", err, q.ExitCode())
	}
}

func TestAProcessThatExitsWhileStartingIsATypedError(t *testing.T) {
	c := testConfig(t)
	c.Env = []string{helperEnv + "=exit"}
	s := newStack(t, c)
	_, err := s.StartBroker(context.Background(), "n1")
	var pe *ProcError
	if !errors.As(err, &pe) || pe.Op != "ready" || pe.Proc != "n1" || !errors.Is(err, ErrExited) {
		t.Fatalf("got %v, want a *ProcError (ready, n1) wrapping ErrExited", err)
	}
}

func TestAFrozenLeaderIsNoLeaderAndNoOtherLeads(t *testing.T) {
	s := newStack(t, testConfig(t))
	ctx := context.Background()
	l, err := s.StartBroker(ctx, "n1", "FUNDUQ_TEST_ROLE=leader")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.StartBroker(ctx, "n2", "FUNDUQ_TEST_ROLE=standby")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Readyz(ctx, sb); err != nil || r.Status != http.StatusServiceUnavailable || r.Role != "standby" || r.Node != "n2" {
		t.Fatalf("standby's readyz: %+v, %v", r, err)
	}
	// The bound is a context already done: WaitLeader looks once, and
	// the only leader is excluded.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.WaitLeader(done, l); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("WaitLeader excluding the leader: %v, want ErrNoLeader", err)
	}
	l.Freeze()
	if got := s.Leader(ctx); got != nil {
		t.Fatalf("a frozen leader was taken for the leader: %v", got)
	}
	l.Thaw()
	if got := s.Leader(ctx); got != l {
		t.Fatalf("after SIGCONT the leader is %v", got)
	}
	l.Freeze() // Close must thaw it to hear SIGTERM
}

func TestTheBalancerGoesToTheLeaderAndCutsItsLinks(t *testing.T) {
	s := newStack(t, testConfig(t))
	ctx := context.Background()
	if _, err := s.StartBroker(ctx, "n1", "FUNDUQ_TEST_ROLE=standby"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartBroker(ctx, "n2", "FUNDUQ_TEST_ROLE=leader"); err != nil {
		t.Fatal(err)
	}
	b, err := s.Balancer()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(b.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var r Readyz
	_ = json.NewDecoder(resp.Body).Decode(&r)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || r.Node != "n2" {
		t.Fatalf("through the balancer: %d %+v, want n2 leading", resp.StatusCode, r)
	}
	if n := b.CutLinks(); n != 1 {
		t.Fatalf("cut %d connections, want the 1 kept alive", n)
	}
}

func TestAClosedStackStartsNothing(t *testing.T) {
	s, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.StartBroker(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if p.Alive() || p.ExitCode() != 0 {
		t.Fatalf("after Close: alive %v, exit %d (want a clean SIGTERM exit)", p.Alive(), p.ExitCode())
	}
	if _, err := s.StartBroker(context.Background(), "n2"); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Balancer(); !errors.Is(err, ErrClosed) {
		t.Fatalf("balancer after Close: %v, want ErrClosed", err)
	}
}

func TestCloseStopsAnSDKProviderAndRefusesANewOne(t *testing.T) {
	s, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	sg, err := identity.NewSignerFromSeedHex(strings.Repeat("cd", 32))
	if err != nil {
		t.Fatal(err)
	}
	cfg := provider.Config{BaseURL: "http://127.0.0.1:1", Signer: sg, FunduqKey: sg.PublicKeyHex(),
		Agents: []provider.Agent{{Name: "a", Handler: func(context.Context, *provider.Run) error { return nil }}},
		Logger: slog.New(slog.DiscardHandler)}
	p, err := s.RunSDK(cfg) // dials nothing that answers: it retries until stopped
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case <-p.Done():
	default:
		t.Fatal("Close returned with the SDK provider still running")
	}
	if _, err := s.RunSDK(cfg); !errors.Is(err, ErrClosed) {
		t.Fatalf("RunSDK after Close: %v, want ErrClosed", err)
	}
}

func TestCreateDatabaseMigratesAndDropRemovesIt(t *testing.T) {
	if _, err := CreateDatabase(context.Background(), "postgres://x/y", "Bad-Name"); !isConfigError(err, "database name") {
		t.Fatalf("a bad name: %v, want a *ConfigError", err)
	}
	admin := os.Getenv("FUNDUQ_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx := context.Background()
	name := fmt.Sprintf("procstack_test_%d", os.Getpid())
	d, err := CreateDatabase(ctx, admin, name)
	if err != nil {
		var de *DatabaseError
		if errors.As(err, &de) && de.Op == "create" && os.Getenv("CI") != "true" {
			t.Skipf("no PostgreSQL to create a database on: %v", err)
		}
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	err = c.QueryRow(ctx, "SELECT count(*) FROM runs").Scan(&runs)
	c.Close(ctx)
	if err != nil || runs != 0 {
		t.Fatalf("the new database's runs table: %d, %v", runs, err)
	}
	if err := d.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, d.URL); err == nil {
		t.Fatal("the database is still there after Drop")
	}
}

func isConfigError(err error, field string) bool {
	var ce *ConfigError
	return errors.As(err, &ce) && ce.Field == field
}
