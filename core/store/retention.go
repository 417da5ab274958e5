package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retention (FUNDUQ_RETENTION): settled runs older than a cutoff are
// deleted with everything that hangs off them — their events, their
// messages, their answer requests — and a thread is deleted once no run is
// left on it, it has no child thread and it has been idle since before the
// cutoff. Deletion goes in bounded batches (River's JobCleaner is the
// model), each its own short transaction, so it never holds many locks or
// a long transaction beside the hot path. A run still active, paused
// (input-required), or settled after the cutoff is never touched.

// Pruned counts what one batch deleted (or, from PrunePreview, would
// delete).
type Pruned struct {
	Runs, Events, Messages, AnswerRequests, Threads int64
	// Agents and Providers are records retention's (PruneRecordsBatch).
	Agents, Providers int64
}

// Add sums two counts.
func (p Pruned) Add(q Pruned) Pruned {
	return Pruned{Runs: p.Runs + q.Runs, Events: p.Events + q.Events, Messages: p.Messages + q.Messages,
		AnswerRequests: p.AnswerRequests + q.AnswerRequests, Threads: p.Threads + q.Threads,
		Agents: p.Agents + q.Agents, Providers: p.Providers + q.Providers}
}

// settledBefore selects the settled runs older than $1: settled when
// completed_at (set with every terminal status) is before the cutoff, or,
// for a row without it, its last activity.
const settledBefore = `status IN ('completed', 'failed', 'cancelled')
	AND coalesce(completed_at, last_activity_at) < $1`

// Now reads PostgreSQL's clock. Retention takes its cutoff from it: the
// times a cutoff is compared with are PostgreSQL's, and a node's or an
// operator's clock may differ from it.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// PruneBatch deletes up to limit settled runs older than cutoff, and the
// threads that leaves empty, in one transaction. Rows another transaction
// holds are skipped (the next batch gets them). A batch that deleted fewer
// than limit runs means none is left.
//
// A door opening a child thread on a parent the batch deletes holds the
// parent's row (the child's foreign key) while it inserts: the delete,
// whose check for children read the snapshot taken before that child
// committed, waits for it and then fails on the foreign key (23503). The
// batch is then taken again, seeing the child, and keeps the parent, as
// PruneRecordsBatch does; the door's own insert after the delete finds
// the parent gone (ErrThreadGone). design.md §The doors.
func (s *Store) PruneBatch(ctx context.Context, cutoff time.Time, limit int) (Pruned, error) {
	var p Pruned
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		p, err = s.pruneBatch(ctx, cutoff, limit)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
			break
		}
	}
	return p, err
}

func (s *Store) pruneBatch(ctx context.Context, cutoff time.Time, limit int) (Pruned, error) {
	var p Pruned
	err := s.inTx(ctx, "prune settled runs", func(tx pgx.Tx) error {
		p = Pruned{}
		// One batch at a time, whoever prunes: two at once (an operator's
		// broker-node prune beside the leader's pass, a deposed leader's
		// last batch beside its successor's) could each delete one of a
		// thread's runs, each still see the other's, both keep the thread,
		// and leave it empty for good, as nothing looks at a thread again
		// once no run of it is left (TestTwoPrunesAtOnceLeaveNoEmptyThread).
		// Taken first, so this batch's reads see the other's commit; a
		// wait for it is logged, so an operator's prune that waits says
		// why, and bounded: a pruner stuck inside its batch (a deposed
		// leader frozen mid-batch, its session still open) would otherwise
		// hang every other pass for as long as its session lives
		// (TestPruneBatchBehindAStuckPrunerFails). The bound is the
		// lock_timeout of the wait alone.
		var took bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pruneLockKey).Scan(&took); err != nil {
			return err
		}
		if !took {
			s.log.InfoContext(ctx, "prune batch waits for another prune's batch to commit", "wait_at_most", pruneLockWait.String())
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(pruneLockWait.Milliseconds(), 1))); err != nil {
				return err
			}
			var pgErr *pgconn.PgError
			_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pruneLockKey)
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				return fmt.Errorf("%w for over %s (a broker-node prune, or a leader's retention pass, stuck in its batch)", ErrPruneBusy, pruneLockWait)
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout TO DEFAULT`); err != nil {
				return err
			}
		}
		var runs, threads []string
		rows, err := tx.Query(ctx, `SELECT run_id, thread_id FROM runs WHERE `+settledBefore+`
			ORDER BY coalesce(completed_at, last_activity_at), run_id LIMIT $2 FOR UPDATE SKIP LOCKED`, cutoff, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r, th string
			if err := rows.Scan(&r, &th); err != nil {
				rows.Close()
				return err
			}
			runs, threads = append(runs, r), append(threads, th)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(runs) == 0 {
			return nil
		}
		for _, d := range []struct {
			n   *int64
			sql string
		}{
			{&p.Events, `DELETE FROM run_events WHERE run_id = ANY($1)`},
			{&p.Messages, `DELETE FROM thread_messages WHERE run_id = ANY($1)`},
			{&p.AnswerRequests, `DELETE FROM answer_requests WHERE run_id = ANY($1)`},
			{&p.Runs, `DELETE FROM runs WHERE run_id = ANY($1)`},
		} {
			tag, err := tx.Exec(ctx, d.sql, runs)
			if err != nil {
				return err
			}
			*d.n = tag.RowsAffected()
		}
		// Threads left empty, then their parents once their last child
		// went, walking up one statement per level until a level deletes
		// nothing: each level holds only the parents of threads the one
		// below deleted, so the walk ends within the chain's depth. It
		// used to stop at 16 levels, and the ancestors above, left with
		// no run, were never looked at again: an A2A conversation whose
		// contexts each referenced the one before leaves a chain that
		// deep (TestPruneDeletesADeepChainOfThreads, design.md §The doors).
		for len(threads) > 0 {
			rows, err := tx.Query(ctx, `DELETE FROM threads t WHERE t.thread_id = ANY($1) AND t.last_activity_at < $2
				AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id)
				AND NOT EXISTS (SELECT 1 FROM thread_messages m WHERE m.thread_id = t.thread_id)
				AND NOT EXISTS (SELECT 1 FROM answer_requests a WHERE a.thread_id = t.thread_id)
				AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_thread_id = t.thread_id)
				RETURNING t.parent_thread_id`, dedupe(threads), cutoff)
			if err != nil {
				return err
			}
			threads = threads[:0]
			for rows.Next() {
				var parent *string
				if err := rows.Scan(&parent); err != nil {
					rows.Close()
					return err
				}
				p.Threads++
				if parent != nil {
					threads = append(threads, *parent)
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return p, err
}

// pruneLockKey is the transaction advisory lock PruneBatch holds: "funduqrp".
const pruneLockKey int64 = 0x66756e6475717270

// pruneLockWait bounds a batch's wait for another pruner's (a var for the
// tests).
var pruneLockWait = 30 * time.Second

// ErrPruneBusy: another pruner's batch held the prune lock for longer than
// a batch waits (pruneLockWait).
var ErrPruneBusy = errors.New("another prune's batch holds the prune lock")

func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// PrunePreview counts what pruning at cutoff would delete, deleting
// nothing (broker-node prune --dry-run): the runs, what hangs off them,
// and the threads the pass leaves empty, a parent with them once every
// child of it goes (doomedThreads).
func (s *Store) PrunePreview(ctx context.Context, cutoff time.Time) (Pruned, error) {
	var p Pruned
	err := s.pool.QueryRow(ctx, `WITH RECURSIVE druns AS (SELECT run_id, thread_id FROM runs WHERE `+settledBefore+`),
		`+doomedThreads("$1")+`
		SELECT (SELECT count(*) FROM druns),
		       (SELECT count(*) FROM run_events e JOIN druns USING (run_id)),
		       (SELECT count(*) FROM thread_messages m JOIN druns USING (run_id)),
		       (SELECT count(*) FROM answer_requests a JOIN druns USING (run_id)),
		       (SELECT count(*) FROM dthreads)`,
		cutoff).Scan(&p.Runs, &p.Events, &p.Messages, &p.AnswerRequests, &p.Threads)
	if err != nil {
		return Pruned{}, fmt.Errorf("preview pruning: %w", err)
	}
	return p, nil
}

// doomedThreads is the CTEs, after druns(run_id, thread_id) (the runs a
// pass at cutoff deletes), ending in dthreads: the threads PruneBatch then
// deletes. A thread goes once no run is left on it, it has no child left
// and it has been idle since before cutoff; PruneBatch looks at a thread
// when a run of it or a child of it goes, walking up, so a parent goes in
// the same pass as the last of its children (a dry run counting only the
// childless promised fewer threads, and agents, than the prune deleted:
// TestPruneDryRunCountsParentThreadsWithTheirChildren). cand holds the
// threads with no run left that are idle; a thread survives when it is
// not a candidate, or is one that nothing makes the pass look at (no run
// of it goes and it has no child), or when a child of it survives
// (blocked, walked up from the children that survive).
func doomedThreads(cutoff string) string {
	return `cand AS (SELECT t.thread_id FROM threads t WHERE t.last_activity_at < ` + cutoff + `
			AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id
				AND NOT EXISTS (SELECT 1 FROM druns d WHERE d.run_id = r.run_id))),
		blocked (thread_id) AS (
			SELECT c.parent_thread_id FROM threads c WHERE c.parent_thread_id IS NOT NULL
				AND (NOT EXISTS (SELECT 1 FROM cand x WHERE x.thread_id = c.thread_id)
				     OR (NOT EXISTS (SELECT 1 FROM druns d WHERE d.thread_id = c.thread_id)
				         AND NOT EXISTS (SELECT 1 FROM threads g WHERE g.parent_thread_id = c.thread_id)))
			UNION
			SELECT t.parent_thread_id FROM threads t JOIN blocked b ON t.thread_id = b.thread_id
				WHERE t.parent_thread_id IS NOT NULL),
		dthreads AS (SELECT c.thread_id FROM cand c
			WHERE NOT EXISTS (SELECT 1 FROM blocked b WHERE b.thread_id = c.thread_id)
				AND (EXISTS (SELECT 1 FROM druns d WHERE d.thread_id = c.thread_id)
				     OR EXISTS (SELECT 1 FROM threads g WHERE g.parent_thread_id = c.thread_id)))`
}

// Records retention (FUNDUQ_AGENT_RETENTION): a key costs a stranger
// nothing, and each leaves a providers row and an agents row per name it
// registered, kept for ever and read over by every GET /agents page that
// walks past them (design.md D8). An agents row goes once nobody has
// served it since before the cutoff — no roster serves it (served_epoch),
// it is not expected back (back_until), and its last register and its
// last going unserved are both older — and no thread or run names it (the
// foreign keys hold a record with a conversation behind it). A providers
// row goes once its key has no agent, no LLM offering and no quality
// counters (D6: the counters are the key's record, a withdrawal included),
// and was last registered before the cutoff. A provider coming back
// registers both again.

// PrunedRecords counts what one records batch deleted.
type PrunedRecords struct {
	Agents, Providers int64
	// Next is the last provider key the batch examined: the next batch
	// starts after it. Done: no key is left after it.
	Next string
	Done bool
}

// agentUnservedBefore selects the agents a that nobody has served since
// before $cutoff (the listing hides them sooner or at the same horizon,
// AgentPageQuery.HiddenAfter) and that no thread or run names.
const agentUnservedBefore = `a.served_epoch IS NULL
	AND greatest(a.last_seen_at, a.unserved_since) < $2
	AND (a.back_until IS NULL OR a.back_until < now())
	AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.provider_key = a.provider_key AND t.agent_name = a.name)
	AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.provider_key = a.provider_key AND r.agent_name = a.name)`

// PruneRecordsBatch examines up to limit provider keys after after, in key
// order, in one short transaction: it deletes their agents nobody has
// served since before cutoff and that no thread or run names, then those
// keys' providers rows left with nothing (see PrunedRecords). Rows another
// transaction holds — a register, a door inserting a thread — are skipped;
// a later pass gets them if they still qualify.
func (s *Store) PruneRecordsBatch(ctx context.Context, cutoff time.Time, after string, limit int) (PrunedRecords, error) {
	var p PrunedRecords
	var err error
	// A thread committed after the statement's snapshot and before the
	// row lock fails the delete on the foreign key (23503) rather than
	// deleting what it names; the batch is then taken again, seeing it.
	for attempt := 0; attempt < 3; attempt++ {
		err = s.inTx(ctx, "prune unserved agents", func(tx pgx.Tx) error {
			p = PrunedRecords{Next: after}
			rows, err := tx.Query(ctx, `SELECT public_key FROM providers WHERE public_key > $1 ORDER BY public_key LIMIT $2`, after, limit)
			if err != nil {
				return err
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			p.Done = len(keys) < limit
			if len(keys) == 0 {
				return nil
			}
			p.Next = keys[len(keys)-1]
			tag, err := tx.Exec(ctx, `DELETE FROM agents WHERE (provider_key, name) IN (
				SELECT a.provider_key, a.name FROM agents a WHERE a.provider_key = ANY($1) AND `+agentUnservedBefore+`
				FOR UPDATE OF a SKIP LOCKED)`, keys, cutoff)
			if err != nil {
				return err
			}
			p.Agents = tag.RowsAffected()
			tag, err = tx.Exec(ctx, `DELETE FROM providers WHERE public_key IN (
				SELECT p.public_key FROM providers p WHERE p.public_key = ANY($1)
					AND greatest(p.first_seen_at, p.updated_at) < $2
					AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.provider_key = p.public_key)
					AND NOT EXISTS (SELECT 1 FROM llm_offerings o WHERE o.provider_key = p.public_key)
					AND NOT EXISTS (SELECT 1 FROM provider_quality q WHERE q.provider_key = p.public_key)
				FOR UPDATE OF p SKIP LOCKED)`, keys, cutoff)
			if err != nil {
				return err
			}
			p.Providers = tag.RowsAffected()
			return nil
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
			break
		}
	}
	return p, err
}

// PruneRecordsPreview counts the agents and providers rows records
// retention at cutoff would delete, deleting nothing. Providers are those
// left with nothing once those agents are gone. A non-zero runsCutoff is
// the runs retention of the same pass, which runs first (retention.Cleaner):
// the threads and runs it would delete (those PrunePreview counts) no
// longer keep an agent, as they no longer do in that pass.
func (s *Store) PruneRecordsPreview(ctx context.Context, cutoff, runsCutoff time.Time) (PrunedRecords, error) {
	var p PrunedRecords
	doomedRuns := `SELECT run_id, thread_id FROM runs WHERE false`
	if !runsCutoff.IsZero() {
		doomedRuns = `SELECT run_id, thread_id FROM runs WHERE ` + strings.ReplaceAll(settledBefore, "$1", "$2")
	}
	// The agent's own checks, with the threads and runs the runs pass
	// deletes first left out.
	agentCheck := strings.ReplaceAll(agentUnservedBefore, "$2", "$1")
	agentCheck = strings.Replace(agentCheck, "t.agent_name = a.name)", "t.agent_name = a.name AND NOT EXISTS (SELECT 1 FROM dthreads d WHERE d.thread_id = t.thread_id))", 1)
	agentCheck = strings.Replace(agentCheck, "r.agent_name = a.name)", "r.agent_name = a.name AND NOT EXISTS (SELECT 1 FROM druns d WHERE d.run_id = r.run_id))", 1)
	err := s.pool.QueryRow(ctx, `WITH RECURSIVE druns AS (`+doomedRuns+`),
		`+doomedThreads("$2")+`,
		doomed AS (SELECT a.provider_key, a.name FROM agents a WHERE true AND `+agentCheck+`)
		SELECT (SELECT count(*) FROM doomed),
		       (SELECT count(*) FROM providers p WHERE greatest(p.first_seen_at, p.updated_at) < $1
		          AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.provider_key = p.public_key
		                          AND (a.provider_key, a.name) NOT IN (SELECT provider_key, name FROM doomed))
		          AND NOT EXISTS (SELECT 1 FROM llm_offerings o WHERE o.provider_key = p.public_key)
		          AND NOT EXISTS (SELECT 1 FROM provider_quality q WHERE q.provider_key = p.public_key))`,
		cutoff, runsCutoff).Scan(&p.Agents, &p.Providers)
	if err != nil {
		return PrunedRecords{}, fmt.Errorf("preview pruning records: %w", err)
	}
	p.Done = true
	return p, nil
}
