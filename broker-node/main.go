// Command broker-node is funduq's long-lived broker: the one lease-holding
// process that owns every provider link, every per-run lane, the roster and
// the sweep, with standbys running the same binary. Its subcommands:
//
//	broker-node migrate    apply the database migrations and exit
//	broker-node lease ...  lease status / lease handover (operators)
//
// Configuration comes from the environment (see README.md), read here at the
// edge and passed down; nothing below main reads it.
//
//	broker-node            serve: lead when it can, stand by otherwise
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redislog"
	"github.com/funduq/funduq-go/core/store"
)

func main() {
	os.Exit(run(os.Args[1:], config.FromList(os.Environ()), os.Stdout, os.Stderr))
}

const usage = `usage: broker-node [command]

commands:
  (none)    serve: POST /tickets, /ws/provider, /livez, /readyz, /metrics (and /console when
            FUNDUQ_CONSOLE_TOKEN is set) on FUNDUQ_HTTP_ADDR,
            and lead the runs while this node holds the lease
  migrate   apply the embedded database migrations to FUNDUQ_DATABASE_URL and exit
  lease     lease status | lease handover: who leads; ask the leader to hand over
  prune     prune --older-than 720h [--dry-run] [--batch N]: delete settled runs older than
            that (events, messages, the run, threads left empty), as FUNDUQ_RETENTION has the
            leader do; --agents-older-than 168h: the agents nobody has served that long, as
            FUNDUQ_AGENT_RETENTION does; --dry-run prints what it would delete (prune --help)
`

const migrateUsage = `usage: broker-node migrate

Applies the embedded database migrations to FUNDUQ_DATABASE_URL and exits, under a
PostgreSQL advisory lock (nodes migrating together take turns); on a schema already
current it applies nothing. Reads FUNDUQ_DATABASE_URL (required),
FUNDUQ_MIGRATE_LOCK_TIMEOUT (5s: the longest a statement waits for a lock; past it, and
after two retries, it exits 1 naming the sessions in long transactions) and
FUNDUQ_LOG_LEVEL.
`

// errUsage: the command line was wrong (usage already printed).
var errUsage = errors.New("usage")

// run is main without the process: it returns the exit code.
func run(args []string, environ map[string]string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		args = []string{"serve"}
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, environ, stderr)
	case "migrate":
		// It has no flags: one an operator expects (--dry-run, say) must
		// not be ignored while the schema is migrated.
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help") {
			fmt.Fprint(stdout, migrateUsage)
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "broker-node migrate: unexpected argument %q (migrate takes none)\n\n%s", args[1], usage)
			return 2
		}
		err = migrate(ctx, environ, stderr)
	case "lease":
		err = leaseCmd(ctx, args[1:], environ, stdout, stderr)
	case "prune":
		err = pruneCmd(ctx, args[1:], environ, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "broker-node: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "broker-node: %v\n", err)
			return 2
		}
		// A refused or failed connection names the server, not where
		// its address came from: say which setting to check.
		var pce *pgconn.ConnectError
		if errors.As(err, &pce) {
			fmt.Fprintf(stderr, "broker-node %s: %v (check FUNDUQ_DATABASE_URL: %s)\n", args[0], err, connectHint(err))
			return 1
		}
		fmt.Fprintf(stderr, "broker-node %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// connectHint says what to look at when PostgreSQL could not be connected
// to: a server that answered refused the URL's database or role; one that
// did not answer is down or out of reach.
func connectHint(err error) string {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "3D000":
		return "create that database first (broker-node migrate then applies the schema), or name another"
	case errors.As(err, &pe):
		return "the server refused it: the user, password or database it names"
	default:
		return "is that PostgreSQL running and reachable from here?"
	}
}

func serve(ctx context.Context, environ map[string]string, stderr io.Writer) error {
	host, _ := os.Hostname()
	cfg, err := config.ParseBroker(environ, config.Host{Hostname: host, PID: os.Getpid()})
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	redislog.Use(log.With("node", cfg.NodeID))
	for _, m := range misspelt(environ) {
		log.WarnContext(ctx, "unknown setting ignored; check its spelling", "variable", m[0], "did_you_mean", m[1])
	}
	n, err := node.New(ctx, cfg, node.Options{Logger: log})
	if err != nil {
		return err
	}
	defer n.Close()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (FUNDUQ_HTTP_ADDR): %w", cfg.HTTPAddr, err)
	}
	return n.Run(ctx, ln)
}

func migrate(ctx context.Context, environ map[string]string, stderr io.Writer) error {
	cfg, err := config.ParseMigrate(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	// FUNDUQ_MIGRATE_LOCK_TIMEOUT=0 is PostgreSQL's "no bound".
	lockTimeout := cfg.LockTimeout
	if lockTimeout == 0 {
		lockTimeout = -1
	}
	err = store.MigrateWith(ctx, cfg.DatabaseURL, store.MigrateOptions{Log: log, LockTimeout: lockTimeout})
	if errors.Is(err, store.ErrSchemaNewer) {
		// Nothing to do, as a host of an older release booting expects
		// (infra/broker.yaml); but the schema is not this binary's, and
		// saying "current" would hide why its node then refuses to start.
		log.WarnContext(ctx, "nothing to apply: "+err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "database schema is current")
	return nil
}

// durationFlag is a flag.Value of a time.Duration that keeps the parser's
// reason: flag.Duration says only "parse error", which leaves an operator
// who typed 30d (or 30) guessing.
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%w (a number with its unit: 30s, 15m, 720h; no d)", err)
	}
	*d = durationFlag(v)
	return nil
}
