// Command local serves every caller door on one port (FUNDUQ_DOORS_ADDR),
// the way API Gateway routes them in a deployment, for development and
// tests:
//
//	POST /agui/{provider}/{name}, GET /threads/{threadId},
//	GET /runs/{runId}/events          the AG-UI door
//	GET /agents                       the agent listing (any door)
//	GET /health                       200 when PostgreSQL and Redis answer
//	GET /chat                         the caller chat page (functions/chat)
//	GET /metrics                      the process's Go and process metrics (Prometheus)
//
// The A2A and KYOK doors mount beside them (see doors in Mux).
//
//	FUNDUQ_DATABASE_URL=… FUNDUQ_REDIS_URL=… FUNDUQ_IDENTITY_KEY=… \
//	FUNDUQ_TOKEN_SECRET=… go run ./functions/local
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redislog"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/chat"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/functions/kyok"
)

// redisPrefix overrides door.RedisPrefix (tests share one Redis with a
// broker node under a prefix of its own).
var redisPrefix string

func main() {
	if code, done := commandLine(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Environ(), os.Stderr, nil)
	stop()
	os.Exit(code)
}

// mount is one door: the path patterns it answers and its handler.
type mount struct {
	name     string
	patterns []string
	handler  http.Handler
}

// Mux mounts every door on one mux. A door added later (A2A, KYOK) is one
// more entry in doors.
func Mux(d *door.Deps, log *slog.Logger) (http.Handler, error) {
	ag, err := agui.New(agui.Options{Store: d.Store, Feed: d.Feed, Funduq: d.Funduq, TokenSecret: d.TokenSecret, Log: log, Limits: d.Limits})
	if err != nil {
		return nil, err
	}
	kd, err := kyok.New(kyok.Options{Store: d.Store, Redis: d.Redis, Prefix: d.Prefix, TokenSecret: d.TokenSecret, Log: log,
		MaxBody: d.Limits.MaxKyokBody, MaxJSONDepth: d.Limits.MaxJSONDepth})
	if err != nil {
		return nil, err
	}
	// The doors that read the schema wait for it (d.Schema: run checked it
	// at start, or could not reach PostgreSQL then); health, the chat page
	// and metrics answer regardless.
	guard := d.Schema.Guard
	doors := []mount{
		{name: "agui", patterns: agui.Patterns(), handler: guard(ag)},
		{name: "a2a", patterns: a2a.Patterns(), handler: guard(a2a.ForDeps(d, log))},
		{name: "kyok", patterns: kyok.Patterns(), handler: guard(kd)},
		{name: "agents", patterns: []string{"GET /agents"}, handler: guard(door.Agents(d.Store, log, d.Limits.AgentsHiddenAfter))},
		{name: "health", patterns: []string{"GET /health"}, handler: health(d)},
		{name: "chat", patterns: chat.Patterns(), handler: chat.Handler()},
		{name: "metrics", patterns: []string{"GET /metrics"}, handler: processMetrics()},
	}
	mux := http.NewServeMux()
	taken := map[string]bool{}
	for _, m := range doors {
		for _, p := range m.patterns {
			taken[p] = true
		}
	}
	for _, m := range doors {
		for _, p := range m.patterns {
			// What ServeMux would answer outside the envelope (D13) is
			// routed too: a route of one method answers the others 405
			// with Allow, as the doors' own routes do, and a door's
			// prefix without its slash is an unknown route, not a
			// redirect with an HTML body.
			if method, path, ok := strings.Cut(p, " "); ok {
				mux.Handle(p, m.handler)
				if !taken[path] {
					mux.HandleFunc(path, door.Only(method, door.NoRoute))
				}
				continue
			}
			mux.Handle(p, m.handler)
			if bare := strings.TrimSuffix(p, "/"); bare != p && bare != "" && !taken[bare] {
				mux.HandleFunc(bare, door.NoRoute)
			}
		}
	}
	mux.HandleFunc("/", door.NoRoute)
	origins, err := door.OriginGuard(d.Limits.TrustedOrigins)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { door.ServeClean(mux, origins, w, r) }), nil
}

// processMetrics serves the Go runtime and process collectors (goroutines,
// resident memory), so a soak can watch a door's footprint over time.
func processMetrics() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// health is 200 when both stores answer, else 503 naming the one that
// does not. Each store is probed under a deadline of its own, both at once:
// under one shared deadline a hung PostgreSQL spent it all, and Redis,
// probed next on the expired context, was reported unreachable too.
func health(d *door.Deps) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := func(ping func(context.Context) error) error {
			ctx, cancel := context.WithTimeout(r.Context(), door.StorageTimeout)
			defer cancel()
			return ping(ctx)
		}
		var dbErr, redisErr error
		var wg sync.WaitGroup
		wg.Go(func() { dbErr = probe(d.Store.Ping) })
		wg.Go(func() { redisErr = probe(func(ctx context.Context) error { return d.Redis.Ping(ctx).Err() }) })
		wg.Wait()
		body := map[string]string{"status": "ok", "database": "ok", "redis": "ok"}
		status := http.StatusOK
		if dbErr != nil {
			body["database"], body["status"], status = "unreachable", "unavailable", http.StatusServiceUnavailable
		}
		if redisErr != nil {
			body["redis"], body["status"], status = "unreachable", "unavailable", http.StatusServiceUnavailable
		}
		if status != http.StatusOK {
			w.Header().Set("Retry-After", "1")
		}
		door.WriteJSON(w, status, body)
	})
}

// run serves until ctx ends and returns the exit code. ready, when set, is
// told the address listened on.
func run(ctx context.Context, environ []string, stderr io.Writer, ready func(addr string)) int {
	cfg, err := config.ParseLocalDoors(config.FromList(environ))
	if err != nil {
		fmt.Fprintf(stderr, "doors: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	redislog.Use(log)
	deps, err := door.Connect(cfg.Door, door.ConnectOptions{Log: log, RedisPrefix: redisPrefix})
	if err != nil {
		log.Error("doors: connect", "err", err)
		return 1
	}
	defer deps.Close()
	// A schema older than this binary needs is refused as a broker node
	// refuses it; PostgreSQL unreachable now is not: the doors start and
	// read the version on a request (design.md §Deployment).
	check, cancelCheck := context.WithTimeout(ctx, door.StorageTimeout)
	err = deps.Store.CheckSchemaReached(check)
	cancelCheck()
	var behind *store.SchemaBehindError
	switch {
	case errors.As(err, &behind):
		fmt.Fprintf(stderr, "doors: %v\n", err)
		return 1
	case err != nil:
		log.Warn("doors: could not read the database schema version; the doors read it again on a request", "err", err)
		deps.Schema = door.NewSchemaGate(deps.Store, log)
	}
	mux, err := Mux(deps, log)
	if err != nil {
		log.Error("doors: build", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", cfg.DoorsAddr)
	if err != nil {
		log.Error("doors: cannot listen on FUNDUQ_DOORS_ADDR", "addr", cfg.DoorsAddr, "err", err)
		return 1
	}
	// "OPTIONS *" goes to the mux like any request (an unknown route in
	// the error envelope, D13), not net/http's own empty 200.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: door.MaxHeaderBytes,
		DisableGeneralOptionsHandler: true, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("doors serving", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("doors: serve", "err", err)
			return 1
		}
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		log.Warn("doors: shutdown", "err", err)
	}
	log.Info("doors stopped")
	return 0
}

// commandLine handles the arguments before any setting is read: done says
// it answered them (with that exit code) and the doors must not start.
func commandLine(args []string, stdout, stderr io.Writer) (code int, done bool) {
	switch {
	case len(args) == 0:
		return 0, false
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(stdout, usage)
		return 0, true
	default:
		fmt.Fprintf(stderr, "doors: unexpected argument %q (the settings are environment variables)\n\n%s", args[0], usage)
		return 2, true
	}
}

const usage = `usage: go run ./functions/local    (or the built binary, .funduq/bin/doors)

Serves every caller door on one port, as API Gateway mounts them in a deployment:
POST /agui/{provider}/{name}, GET /threads/{threadId}, GET /runs/{runId}/events (AG-UI),
POST /a2a/{provider}/{name} and its agent card (A2A), POST /kyok/v1/chat/completions,
GET /agents, GET /health, GET /metrics, and the chat page at /chat.

Settings (environment; README "Configuration" lists the doors' limits):
  FUNDUQ_DATABASE_URL   PostgreSQL DSN (required; migrated by broker-node migrate)
  FUNDUQ_REDIS_URL      Redis URL (required)
  FUNDUQ_IDENTITY_KEY   funduq's Ed25519 seed, 64 hex, the broker nodes' (required)
  FUNDUQ_TOKEN_SECRET   the KYOK token secret, the broker nodes' (required)
  FUNDUQ_DOORS_ADDR     listen address (127.0.0.1:8701)
  FUNDUQ_REDIS_PREFIX   prefix of funduq's Redis keys, the broker nodes' (funduq:)
  FUNDUQ_LOG_LEVEL      debug, info, warn, error (info)
`
