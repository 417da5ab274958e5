package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/funduq/funduq-go/core/backoff"
)

// DefaultMigrateLockTimeout is how long a migration statement waits for a
// lock by default (FUNDUQ_MIGRATE_LOCK_TIMEOUT).
const DefaultMigrateLockTimeout = 5 * time.Second

// DefaultMigrateAttempts is how many times a migration that waited out its
// lock timeout is tried, by default.
const DefaultMigrateAttempts = 3

// MigrateOptions tune MigrateWith.
type MigrateOptions struct {
	Log *slog.Logger // nil: discard
	// LockTimeout is the migration sessions' lock_timeout: the longest
	// one statement waits for a lock (0: DefaultMigrateLockTimeout;
	// negative: no bound, as PostgreSQL's own default).
	LockTimeout time.Duration
	// Attempts is how many times a migration that waited out LockTimeout
	// is tried in all, with a backoff between (0: DefaultMigrateAttempts).
	Attempts int
}

// ErrMigrationLockTimeout: a migration statement waited its lock timeout
// for a lock another session holds, on every attempt; nothing of that
// migration is applied (a migration without a transaction keeps the
// steps it finished, each of which can run again).
var ErrMigrationLockTimeout = errors.New("a migration waited too long for a lock")

// migrateBackoff paces the attempts: 1 s, then 2 s, up to 8 s.
var migrateBackoff = backoff.Policy{Min: time.Second, Max: 8 * time.Second}

// MigrateWith is Migrate with a bounded wait for locks (design.md
// §Deployment, "Migrations wait for a lock at most FUNDUQ_MIGRATE_LOCK_TIMEOUT").
// A statement that alters a table asks for a lock that conflicts with every
// ordinary query on it; while a long transaction holds that table, the
// request waits, and every door and broker query on the table queues behind
// it. With lock_timeout on every session the migration opens, the request
// is withdrawn after LockTimeout and the queue drains; the migration is
// tried again after a backoff, and after Attempts the error (wrapping
// ErrMigrationLockTimeout) names the migration and the sessions whose
// transactions are older than the timeout.
func MigrateWith(ctx context.Context, dsn string, o MigrateOptions) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultMigrateLockTimeout
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultMigrateAttempts
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrate: database URL: %w", err)
	}
	if o.LockTimeout > 0 {
		// A startup parameter, so it holds on every connection goose uses
		// and for migrations without a transaction (CREATE INDEX
		// CONCURRENTLY cannot run in one, so SET LOCAL would not do).
		cfg.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", max(o.LockTimeout.Milliseconds(), 1))
	}
	for attempt := 1; ; attempt++ {
		err := migrateOnce(ctx, cfg, o.Log)
		if !isLockTimeout(err) {
			return err
		}
		if attempt >= o.Attempts || ctx.Err() != nil {
			return lockTimeoutError(ctx, cfg, err, o.LockTimeout, attempt)
		}
		wait := migrateBackoff.Delay(attempt)
		o.Log.WarnContext(ctx, "a migration waited out its lock timeout: another session holds a lock on what it changes; retrying",
			"migration", failedMigration(err), "lock_timeout", o.LockTimeout.String(), "attempt", attempt, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return lockTimeoutError(ctx, cfg, err, o.LockTimeout, attempt)
		case <-time.After(wait):
		}
	}
}

// migrateOnce runs one Up over a pool of its own, closed after: a
// session a migration SET something on is not reused by the next attempt.
func migrateOnce(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) error {
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return MigrateDB(ctx, db, log)
}

// isLockTimeout: PostgreSQL's lock_not_available (55P03), what a
// statement that waited out lock_timeout fails with.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// failedMigration names the migration file err is the failure of.
func failedMigration(err error) string {
	var pe *goose.PartialError
	if errors.As(err, &pe) && pe.Failed != nil && pe.Failed.Source != nil {
		if p := pe.Failed.Source.Path; p != "" {
			return p
		}
		return fmt.Sprintf("version %d", pe.Failed.Source.Version)
	}
	return "a migration"
}

// lockTimeoutError is the operator's answer: which migration, how long it
// waited, and the sessions whose transactions have been open longer than
// that — the likely holders — so the operator can end them or wait.
func lockTimeoutError(ctx context.Context, cfg *pgx.ConnConfig, err error, timeout time.Duration, attempts int) error {
	holders := "none found now"
	if h, herr := longTransactions(ctx, cfg, timeout); herr != nil {
		holders = "could not be listed: " + herr.Error()
	} else if len(h) > 0 {
		holders = strings.Join(h, "; ")
	}
	return fmt.Errorf("migrate: %w: %s waited %s for a lock (lock_timeout, FUNDUQ_MIGRATE_LOCK_TIMEOUT) on each of %d attempts: "+
		"another session holds a lock on a table it changes, and while it waits every query on that table queues behind it. "+
		"Sessions in a transaction for longer than that: %s. End them (pg_terminate_backend) or let them finish, "+
		"then run migrate again: %v", ErrMigrationLockTimeout, failedMigration(err), timeout, attempts, holders, err)
}

// longTransactions lists, in the migrated database, up to five sessions
// other than this one whose transaction is older than d, oldest first.
func longTransactions(ctx context.Context, cfg *pgx.ConnConfig, d time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(state, ''),
			extract(epoch FROM now() - xact_start)::bigint
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
			AND xact_start < now() - make_interval(secs => $1::float8 / 1000)
		ORDER BY xact_start LIMIT 5`, max(d.Milliseconds(), 0))
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		var pid int
		var app, state string
		var secs int64
		if err := rows.Scan(&pid, &app, &state, &secs); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("pid %d (application_name %q, %s, in its transaction for %d s)", pid, app, state, secs))
	}
	return out, rows.Err()
}
