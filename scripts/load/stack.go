package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/procstack"
)

// roleEnv makes this binary (or the test binary) a broker node child.
const roleEnv = "FUNDUQ_LOAD_ROLE"

// stack is what the load runs against.
type stack struct {
	brokerURL, doorsURL, dbURL string
	brokerPID                  int // 0 when targeting a running node
	doorsPID                   int // the doors' own process (-bin); 0 when they are in this one or not ours
	pprofAddr                  string
	// accepted is when the doors accepted each run (their store's "run
	// queued"); nil when targeting running doors.
	accepted *accepted
	close    func()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startStack creates a database, starts a broker node child on it and
// serves the doors in this process.
func startStack(ctx context.Context, c Config, logf func(string, ...any)) (*stack, error) {
	if c.BrokerURL != "" {
		return &stack{brokerURL: c.BrokerURL, doorsURL: c.DoorsURL, dbURL: c.DatabaseURL, close: func() {}}, nil
	}
	var closers []func()
	st := &stack{close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	fail := func(err error) (*stack, error) { st.close(); return nil, err }

	dbName := fmt.Sprintf("funduq_load_%d_%s", os.Getpid(), randHex(3))
	create := procstack.CreateDatabase
	if c.BinDir != "" {
		create = procstack.CreateEmptyDatabase // the build's broker-node migrates it, below
	}
	db, err := create(ctx, c.PostgresURL, dbName)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() {
		if os.Getenv("FUNDUQ_LOAD_KEEP_DB") != "" { // for a look at the rows afterwards
			logf("kept database %s", dbName)
			return
		}
		if err := db.Drop(context.Background()); err != nil {
			logf("%v", err)
		}
	})
	st.dbURL = db.URL
	if c.BinDir != "" {
		cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "broker-node"), "migrate")
		cmd.Env = append(os.Environ(), "FUNDUQ_DATABASE_URL="+db.URL)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fail(fmt.Errorf("%s/broker-node migrate: %w\n%s", c.BinDir, err, out))
		}
	}
	if os.Getenv("FUNDUQ_LOAD_LOG_STATEMENTS") != "" {
		// Every statement of this database's sessions (opened from now on)
		// goes to the server's log, to see where a run's transactions go.
		if err := db.Admin(ctx, "ALTER DATABASE "+dbName+" SET log_statement = 'all'"); err != nil {
			return fail(fmt.Errorf("log statements: %w", err))
		}
		logf("logging every statement of database %s", dbName)
	}

	prefix := fmt.Sprintf("funduq-load-%d-%s:", os.Getpid(), randHex(3))
	identityKey, secret := randHex(32), randHex(32)
	pprofLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	st.pprofAddr = pprofLn.Addr().String()
	_ = pprofLn.Close()
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	logDir, err := os.MkdirTemp("", "funduq-load-")
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = os.RemoveAll(logDir) })
	// The broker node is this binary (brokerChild), started and stopped by
	// the shared process stack; its output goes to stderr as before. With
	// -bin both are the given build's.
	bins := procstack.Binaries{Broker: self}
	if c.BinDir != "" {
		bins = procstack.Binaries{Broker: filepath.Join(c.BinDir, "broker-node"), Doors: filepath.Join(c.BinDir, "doors-local")}
	}
	ps, err := procstack.New(procstack.Config{
		Binaries: bins, DatabaseURL: st.dbURL, RedisURL: c.RedisURL, RedisPrefix: prefix,
		IdentityKey: identityKey, TokenSecret: secret, Inherit: true,
		Env:    []string{roleEnv + "=broker", "FUNDUQ_LOG_LEVEL=error", "FUNDUQ_LEASE_TTL=10s", "FUNDUQ_PPROF_ADDR=" + st.pprofAddr},
		LogDir: logDir, Echo: os.Stderr, Boot: 30 * time.Second, StopGrace: 10 * time.Second,
	})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, ps.Close)
	broker, err := ps.StartBroker(ctx, "load-broker",
		"FUNDUQ_DATABASE_URL="+withParam(st.dbURL, os.Getenv("FUNDUQ_LOAD_BROKER_DSN_PARAMS")))
	if err != nil {
		return fail(fmt.Errorf("start broker node: %w", err))
	}
	st.brokerPID, st.brokerURL = broker.PID(), broker.URL
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = ps.WaitLeader(lctx)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("broker node never led: %w", err))
	}

	if c.BinDir != "" {
		// The doors' process logs at error only, as the broker's: a log line
		// per request would be part of what is measured.
		// Its pool is as large as the in-process doors' (MaxConns below).
		doors, err := ps.StartDoor(ctx, "load-doors", "FUNDUQ_LOG_LEVEL=error",
			"FUNDUQ_DATABASE_URL="+withParam(st.dbURL, "pool_max_conns=32"))
		if err != nil {
			return fail(fmt.Errorf("start doors: %w", err))
		}
		st.doorsPID, st.doorsURL = doors.PID(), doors.URL
		logf("stack: broker node %s (pid %d), doors %s (pid %d), database %s, from %s", st.brokerURL, st.brokerPID, st.doorsURL, st.doorsPID, dbName, c.BinDir)
		return st, nil
	}

	// The doors' store logs "run queued" once a run is committed (its
	// NOTIFY sent): that moment is "door accepted". Their other records are
	// discarded, as before.
	st.accepted = &accepted{}
	doorLog := slog.New(newAcceptHandler(slog.DiscardHandler, st.accepted))
	deps, err := door.Connect(config.Door{Storage: config.Storage{DatabaseURL: st.dbURL, RedisURL: c.RedisURL, RedisPrefix: prefix},
		Identity: config.Identity{IdentityKey: identityKey, TokenSecret: secret}}, door.ConnectOptions{RedisPrefix: prefix, MaxConns: 32, Log: doorLog})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, deps.Close)
	ag, err := agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret})
	if err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	for _, p := range agui.Patterns() {
		mux.Handle(p, ag)
	}
	for _, p := range a2a.Patterns() {
		mux.Handle(p, a2a.ForDeps(deps, nil))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	closers = append(closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	st.doorsURL = "http://" + ln.Addr().String()
	logf("stack: broker node %s (pid %d), doors %s, database %s", st.brokerURL, st.brokerPID, st.doorsURL, dbName)
	return st, nil
}

// withParam appends extra DSN query parameters (k=v&…) to u.
func withParam(u, extra string) string {
	if extra == "" {
		return u
	}
	if strings.Contains(u, "?") {
		return u + "&" + extra
	}
	return u + "?" + extra
}

// brokerChild serves a broker node from the environment (procstack sets
// FUNDUQ_HTTP_ADDR) until SIGTERM.
func brokerChild() int {
	raiseNoFile()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	host, _ := os.Hostname()
	cfg, err := config.ParseBroker(config.FromList(os.Environ()), config.Host{Hostname: host, PID: os.Getpid()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.AdvertiseURL = "http://" + ln.Addr().String()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	n, err := node.New(ctx, cfg, node.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := n.Run(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// raiseNoFile lifts the soft open-files limit to the hard one (idle links
// need one descriptor each, on both ends).
func raiseNoFile() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}
