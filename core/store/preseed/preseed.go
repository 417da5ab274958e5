// Package preseed writes prior history into a funduq database in SQL
// (generate_series): completed runs on threads of one agent, with their
// caller and agent messages and their events, so a test or the load tool
// measures a database that holds history instead of an empty one. It writes
// rows the store would have written for finished runs; nothing reads them
// back as live.
package preseed

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// Options say how much history to write and for which agent.
type Options struct {
	Runs          int    // completed runs to write
	RunsPerThread int    // runs per thread (0: 4)
	ProviderKey   string // the agent's provider key (64 hex); recorded if missing
	Fingerprint   string // the key's fingerprint (16 hex), used only when the provider is recorded here
	AgentName     string // the agent; recorded if missing
	// Prefix starts every id written (0–32 characters of [A-Za-z0-9_-]), so
	// two seeds of one database do not collide; "" is "preseed".
	Prefix string
}

// Per run: the caller's message and the agent's reply, and three events.
const (
	MessagesPerRun = 2
	EventsPerRun   = 3
)

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{0,32}$`)

// chunk bounds one statement's rows (runs) so a large seed does not build
// one enormous transaction.
const chunk = 50000

// Seed writes o.Runs completed runs of history. As a superuser it writes
// with foreign keys unchecked (session_replication_role = replica): every
// row it writes references a row it wrote first or the agent it recorded.
func Seed(ctx context.Context, db *sql.DB, o Options) (err error) {
	if o.RunsPerThread <= 0 {
		o.RunsPerThread = 4
	}
	if o.Prefix == "" {
		o.Prefix = "preseed"
	}
	if !prefixRE.MatchString(o.Prefix) {
		return fmt.Errorf("preseed: prefix %q: want up to 32 of [A-Za-z0-9_-]", o.Prefix)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("preseed: %w", err)
	}
	defer conn.Close()
	exec := func(what, q string, args ...any) error {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("preseed: %s: %w", what, err)
		}
		return nil
	}
	// Unchecked foreign keys make the seed about twice as fast. A role that
	// may not skip them (no superuser) drops them and adds them back, which
	// validates each in one join instead of one probe per row.
	if _, err := conn.ExecContext(ctx, `SET session_replication_role = replica`); err == nil {
		defer conn.ExecContext(context.WithoutCancel(ctx), `RESET session_replication_role`) //nolint:errcheck // the connection is closed next
	} else {
		restore, err := dropForeignKeys(ctx, conn)
		if err != nil {
			return err
		}
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	if err := exec("session", `SET synchronous_commit = off`); err != nil {
		return err
	}
	if err := exec("provider", `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		o.ProviderKey, o.Fingerprint); err != nil {
		return err
	}
	if err := exec("agent", `INSERT INTO agents (provider_key, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		o.ProviderKey, o.AgentName); err != nil {
		return err
	}
	// Run i (1-based) is <prefix>-r-i on thread <prefix>-t-((i-1)/per+1).
	for lo := 1; lo <= o.Runs; lo += chunk {
		hi := min(lo+chunk-1, o.Runs)
		args := []any{o.Prefix, lo, hi, o.RunsPerThread, o.ProviderKey, o.AgentName}
		if err := exec("threads", `INSERT INTO threads (thread_id, provider_key, agent_name, created_at, last_activity_at)
			SELECT $1 || '-t-' || t, $5, $6, now(), now()
			FROM generate_series(($2::int - 1) / $4::int + 1, ($3::int - 1) / $4::int + 1) t
			ON CONFLICT DO NOTHING`, args...); err != nil {
			return err
		}
		if err := exec("runs", `INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input,
				caller_request_id, idempotency_key, last_seq, round_seq, started_at, completed_at)
			SELECT $1 || '-r-' || i, $1 || '-t-' || ((i - 1) / $4::int + 1), $5, $6, 'completed',
				'{"threadId":"seeded","runId":"seeded","messages":[]}', $1 || '-c-' || i,
				CASE WHEN i % 2 = 0 THEN $1 || '-k-' || i END, 3, 0, now(), now()
			FROM generate_series($2::int, $3::int) i`, args...); err != nil {
			return err
		}
		if err := exec("messages", `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
			SELECT $1 || '-t-' || ((i - 1) / $4::int + 1), $1 || '-r-' || i, $1 || '-m-' || i || '-' || o,
				CASE o WHEN 1 THEN '{"role":"user","content":"hello"}' ELSE '{"role":"assistant","content":"hello"}' END::json,
				CASE o WHEN 1 THEN 'caller' ELSE 'agent' END
			FROM generate_series($2::int, $3::int) i, generate_series(1, 2) o
			ORDER BY i, o`, args[:4]...); err != nil {
			return err
		}
		if err := exec("events", `INSERT INTO run_events (run_id, seq, event, provider_seq)
			SELECT $1 || '-r-' || i, s, CASE s WHEN 1 THEN '{"type":"RUN_STARTED"}'
				WHEN 2 THEN '{"type":"TEXT_MESSAGE_CONTENT","delta":"hello"}' ELSE '{"type":"RUN_FINISHED"}' END::json, s
			FROM generate_series($2::int, $3::int) i, generate_series(1, 3) s
			ORDER BY i, s`, args[:3]...); err != nil {
			return err
		}
	}
	return nil
}

// dropForeignKeys drops the foreign keys of the tables Seed writes and
// returns what adds them back, each as pg_get_constraintdef says it was,
// so the schema after a seed is the schema before it.
func dropForeignKeys(ctx context.Context, conn *sql.Conn) (func() error, error) {
	rows, err := conn.QueryContext(ctx, `SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
		FROM pg_constraint WHERE contype = 'f'
		AND conrelid IN ('runs'::regclass, 'threads'::regclass, 'thread_messages'::regclass, 'run_events'::regclass)
		ORDER BY conrelid, conname`)
	if err != nil {
		return nil, fmt.Errorf("preseed: foreign keys: %w", err)
	}
	type fk struct{ table, name, def string }
	var fks []fk
	for rows.Next() {
		var f fk
		if err := rows.Scan(&f.table, &f.name, &f.def); err != nil {
			rows.Close()
			return nil, fmt.Errorf("preseed: foreign keys: %w", err)
		}
		fks = append(fks, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("preseed: foreign keys: %w", err)
	}
	restore := func() error {
		for _, f := range fks {
			q := fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, f.table, quoteIdent(f.name), f.def)
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), q); err != nil {
				var exists bool
				_ = conn.QueryRowContext(context.WithoutCancel(ctx), `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = $1 AND conrelid = $2::regclass)`,
					f.name, f.table).Scan(&exists)
				if !exists {
					return fmt.Errorf("preseed: restore foreign key %s: %w", f.name, err)
				}
			}
		}
		return nil
	}
	for _, f := range fks {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s`, f.table, quoteIdent(f.name))); err != nil {
			_ = restore()
			return nil, fmt.Errorf("preseed: drop foreign key %s: %w", f.name, err)
		}
	}
	return restore, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
