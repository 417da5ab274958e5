package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunAge is one run picked out by the overview, with how long it has
// waited (queued) or run (running), measured by the database's clock.
type RunAge struct {
	RunID       string
	ProviderKey string
	AgentName   string
	Status      string
	Since       time.Time
	Age         time.Duration
}

// FailureCount is how many runs failed for one reason in the window,
// counted apart by whose words the reason is: a provider may write
// funduq's reason names too (Run.FailureByProvider).
type FailureCount struct {
	Reason     string
	ByProvider bool
	Count      int64
	Last       time.Time
}

// Overview is what the operator console shows of the runs table. The
// console reads it every 1.5 s, so nothing in it costs more as ended runs
// pile up (retention is off by default): exact counts are read through
// indexes that hold only active or failed runs, and the rest is
// PostgreSQL's own estimate (design.md §The operator console, "What the
// runs figures mean").
type Overview struct {
	// ByStatus counts the active runs exactly, by status (queued,
	// offering, running, cancelling; a status with no run is absent).
	ByStatus map[string]int64
	// Estimated is PostgreSQL's estimate of the runs in each status as of
	// its last ANALYZE of the table (EstimatedAt): the planner's row count
	// times the status's share of the sampled rows. A status missing
	// from it was too rare for the sample to say (or no ANALYZE has run).
	Estimated map[string]int64
	// EstimatedTotal is the planner's estimate of all runs stored: the
	// rows per page its statistics saw, times the pages now (-1: none,
	// the table was never vacuumed or analyzed, or only while empty).
	EstimatedTotal int64
	// EstimatedAt is when the statistics were gathered (nil: never).
	EstimatedAt *time.Time
	// OldestQueued is the queued run that has waited longest (nil: none).
	OldestQueued *RunAge
	// LongestRunning is the running (or cancelling) run that started
	// earliest (nil: none).
	LongestRunning *RunAge
	// Failures counts the runs that failed within the window, by reason
	// (its first OverviewReasonChars characters) and its author (funduq or
	// the provider), most frequent first, at
	// most OverviewReasons of them; OmittedReasons and OmittedRuns count
	// the reasons past those and their runs. A reason may be a provider's
	// text of any length, and each distinct one a row: bounded, the
	// overview stays small whatever providers write.
	Failures       []FailureCount
	OmittedReasons int64
	OmittedRuns    int64
	// Window is the failures' window.
	Window time.Duration
}

// ActiveStatuses are the statuses ByStatus counts exactly: those
// runs_active_idx holds.
var ActiveStatuses = []string{"queued", "offering", "running", "cancelling"}

// OverviewReasons is how many failure reasons the overview lists, and
// OverviewReasonChars how much of each it keeps.
const (
	OverviewReasons     = 50
	OverviewReasonChars = 512
)

// RunsOverview reads the runs table for the operator console: the active
// runs by status, the oldest queued and longest running run, the failures
// of the last window by reason, and PostgreSQL's estimate of the rest. It
// writes nothing, and reads only active runs and the window's failures
// (runs_active_idx, runs_failed_idx), never the ended history.
func (s *Store) RunsOverview(ctx context.Context, window time.Duration) (Overview, error) {
	ov := Overview{ByStatus: map[string]int64{}, Estimated: map[string]int64{}, Window: window}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		// The predicate is runs_active_idx's own, so the index serves it
		// with or without statistics.
		rows, err := tx.Query(ctx, `SELECT status, count(*) FROM runs
			WHERE status IN ('queued', 'offering', 'running', 'cancelling') GROUP BY status`)
		if err != nil {
			return err
		}
		var status string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { ov.ByStatus[status] = n; return nil }); err != nil {
			return err
		}
		// reltuples is -1 until the first VACUUM or ANALYZE (PostgreSQL
		// 14+), and the count of rows then: a table analyzed empty keeps 0
		// as it grows. So the total is the planner's own (estimate_rel_size):
		// the rows per page then, times the pages now; none while the
		// table has pages but its statistics saw none. The status's share
		// is the sampled most common values'.
		var vals []string
		var freqs []float64
		if err := tx.QueryRow(ctx, `
			SELECT CASE WHEN c.reltuples < 0 THEN -1
					WHEN c.relpages > 0 THEN round(c.reltuples / c.relpages *
						(pg_relation_size(c.oid) / current_setting('block_size')::bigint))::bigint
					WHEN pg_relation_size(c.oid) = 0 THEN 0
					ELSE -1 END,
				greatest(t.last_analyze, t.last_autoanalyze),
				coalesce(st.most_common_vals::text::text[], '{}'), coalesce(st.most_common_freqs, '{}')
			FROM pg_class c
			LEFT JOIN pg_stat_user_tables t ON t.relid = c.oid
			LEFT JOIN pg_namespace ns ON ns.oid = c.relnamespace
			LEFT JOIN pg_stats st ON st.schemaname = ns.nspname AND st.tablename = c.relname AND st.attname = 'status'
			WHERE c.oid = 'runs'::regclass`).Scan(&ov.EstimatedTotal, &ov.EstimatedAt, &vals, &freqs); err != nil {
			return err
		}
		if ov.EstimatedTotal >= 0 {
			for i, v := range vals {
				if i < len(freqs) {
					ov.Estimated[v] = int64(math.Round(float64(ov.EstimatedTotal) * freqs[i]))
				}
			}
		}
		if ov.OldestQueued, err = oneRunAge(ctx, tx, `
			SELECT run_id, provider_key, agent_name, status, queued_at, now() - queued_at
			FROM runs WHERE status = 'queued' ORDER BY queued_at, run_id LIMIT 1`); err != nil {
			return err
		}
		if ov.LongestRunning, err = oneRunAge(ctx, tx, `
			SELECT run_id, provider_key, agent_name, status, coalesce(started_at, queued_at), now() - coalesce(started_at, queued_at)
			FROM runs WHERE status IN ('running', 'cancelling') ORDER BY coalesce(started_at, queued_at), run_id LIMIT 1`); err != nil {
			return err
		}
		// Through runs_failed_idx: every writer of 'failed' sets
		// completed_at in the same UPDATE (00018_failed_runs_idx.sql).
		rows, err = tx.Query(ctx, `
			WITH f AS (
				SELECT coalesce(left(failure_reason, $2), '') AS reason, failure_by_provider AS by_provider,
					count(*) AS n, max(completed_at) AS last
				FROM runs WHERE status = 'failed' AND completed_at > now() - $1::interval
				GROUP BY 1, 2)
			SELECT reason, by_provider, n, last, count(*) OVER (), (sum(n) OVER ())::bigint
			FROM f ORDER BY n DESC, reason, by_provider LIMIT $3`, window, OverviewReasonChars, OverviewReasons)
		if err != nil {
			return err
		}
		var f FailureCount
		var reasons, runs int64
		_, err = pgx.ForEachRow(rows, []any{&f.Reason, &f.ByProvider, &f.Count, &f.Last, &reasons, &runs}, func() error {
			ov.Failures = append(ov.Failures, f)
			ov.OmittedReasons, ov.OmittedRuns = reasons, runs
			return nil
		})
		for _, f := range ov.Failures {
			ov.OmittedReasons--
			ov.OmittedRuns -= f.Count
		}
		return err
	})
	if err != nil {
		return Overview{}, fmt.Errorf("runs overview: %w", err)
	}
	return ov, nil
}

func oneRunAge(ctx context.Context, tx pgx.Tx, sql string) (*RunAge, error) {
	var r RunAge
	err := tx.QueryRow(ctx, sql).Scan(&r.RunID, &r.ProviderKey, &r.AgentName, &r.Status, &r.Since, &r.Age)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ProviderRow is a provider as the store knows it: its display name and the
// agents the current leader's roster serves.
type ProviderRow struct {
	PublicKey   string
	Fingerprint string
	DisplayName string
	Online      []string // names served under the current epoch, sorted
}

// OnlineProviders lists the first limit providers, by key, that the
// current leader's roster serves agents for, with the names each is
// served under now (Online, sorted), and how many there are in all: a console on a standby reads
// this every 1.5 s, and keys cost a stranger nothing (design.md §The
// provider wire, "Admission"), so it is read a page at a time.
func (s *Store) OnlineProviders(ctx context.Context, limit int) ([]ProviderRow, int, error) {
	rows, err := s.pool.Query(ctx, `
		WITH online AS (
			SELECT a.provider_key, array_agg(a.name ORDER BY a.name) AS names
			FROM agents a JOIN broker_leader l ON a.served_epoch = l.epoch
			JOIN broker_heartbeat h ON h.epoch = l.epoch AND h.alive_until > now()
			GROUP BY a.provider_key)
		SELECT p.public_key, p.fingerprint, coalesce(p.display_name, ''), o.names, count(*) OVER ()
		FROM online o JOIN providers p ON p.public_key = o.provider_key
		ORDER BY p.public_key LIMIT $1`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("list online providers: %w", err)
	}
	total := 0
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProviderRow, error) {
		var p ProviderRow
		err := row.Scan(&p.PublicKey, &p.Fingerprint, &p.DisplayName, &p.Online, &total)
		return p, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list online providers: %w", err)
	}
	return list, total, nil
}

// ProvidersByKey reads the fingerprint and display name of each of keys
// (Online left empty); a key the store does not know is absent.
func (s *Store) ProvidersByKey(ctx context.Context, keys []string) (map[string]ProviderRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT public_key, fingerprint, coalesce(display_name, '')
		FROM providers WHERE public_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	out := map[string]ProviderRow{}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		var p ProviderRow
		err := row.Scan(&p.PublicKey, &p.Fingerprint, &p.DisplayName)
		out[p.PublicKey] = p
		return struct{}{}, err
	})
	if err != nil {
		return nil, fmt.Errorf("read providers: %w", err)
	}
	return out, nil
}
