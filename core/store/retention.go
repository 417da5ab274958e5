package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
}

// Add sums two counts.
func (p Pruned) Add(q Pruned) Pruned {
	return Pruned{p.Runs + q.Runs, p.Events + q.Events, p.Messages + q.Messages,
		p.AnswerRequests + q.AnswerRequests, p.Threads + q.Threads}
}

// settledBefore selects the settled runs older than $1: settled when
// completed_at (set with every terminal status) is before the cutoff, or,
// for a row without it, its last activity.
const settledBefore = `status IN ('completed', 'failed', 'cancelled')
	AND coalesce(completed_at, last_activity_at) < $1`

// PruneBatch deletes up to limit settled runs older than cutoff, and the
// threads that leaves empty, in one transaction. Rows another transaction
// holds are skipped (the next batch gets them). A batch that deleted fewer
// than limit runs means none is left.
func (s *Store) PruneBatch(ctx context.Context, cutoff time.Time, limit int) (Pruned, error) {
	var p Pruned
	err := s.inTx(ctx, "prune settled runs", func(tx pgx.Tx) error {
		p = Pruned{}
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
		// went (a bounded walk up: one statement per level).
		for level := 0; len(threads) > 0 && level < 16; level++ {
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
// nothing (broker-node prune --dry-run). Threads are those every run of
// which would go and that are idle since before the cutoff; a parent
// thread that would go only after its children is not counted.
func (s *Store) PrunePreview(ctx context.Context, cutoff time.Time) (Pruned, error) {
	var p Pruned
	err := s.pool.QueryRow(ctx, `WITH doomed AS (SELECT run_id FROM runs WHERE `+settledBefore+`)
		SELECT (SELECT count(*) FROM doomed),
		       (SELECT count(*) FROM run_events e JOIN doomed USING (run_id)),
		       (SELECT count(*) FROM thread_messages m JOIN doomed USING (run_id)),
		       (SELECT count(*) FROM answer_requests a JOIN doomed USING (run_id)),
		       (SELECT count(*) FROM threads t WHERE t.last_activity_at < $1
		          AND EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id)
		          AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id
		                          AND r.run_id NOT IN (SELECT run_id FROM doomed))
		          AND NOT EXISTS (SELECT 1 FROM threads c WHERE c.parent_thread_id = t.thread_id))`,
		cutoff).Scan(&p.Runs, &p.Events, &p.Messages, &p.AnswerRequests, &p.Threads)
	if err != nil {
		return Pruned{}, fmt.Errorf("preview pruning: %w", err)
	}
	return p, nil
}
