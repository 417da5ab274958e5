package store

import (
	"context"
	"fmt"

	"github.com/funduq/funduq-go/core/run"
	"github.com/jackc/pgx/v5"
)

// RunsInStatus lists runs in any of statuses, oldest queued first.
func (s *Store) RunsInStatus(ctx context.Context, statuses ...string) ([]Run, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM runs WHERE status = ANY($1)
		ORDER BY queued_at, run_id`, statuses)
	if err != nil {
		return nil, fmt.Errorf("list runs in %v: %w", statuses, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
}

// Adopt stamps a held run (running or cancelling) with the new leader's
// epoch: its provider re-attached and reported for it (D7). A run that is
// no longer running or cancelling is refused with a *TransitionError
// (ErrIllegalTransition) naming the status it was found in.
func (s *Store) Adopt(ctx context.Context, epoch int64, runID string) (Run, error) {
	var out Run
	err := s.inTx(ctx, "adopt run "+runID, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		r, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET owner_epoch = $2, last_activity_at = now()
			WHERE run_id = $1 AND status IN ('running', 'cancelling') RETURNING `+runColumns, runID, epoch))
		if err == pgx.ErrNoRows {
			var found string
			if err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1`, runID).Scan(&found); err == pgx.ErrNoRows {
				return ErrNotFound
			} else if err != nil {
				return err
			}
			// Not held any more: a refusal, not a fault to retry (the
			// broker retries its writes until it steps down).
			return &TransitionError{RunID: runID, From: run.Status(found), To: run.Status(found), Writer: run.ByBroker}
		}
		out = r
		return err
	})
	return out, err
}

// CancelRequestedActive lists the ids of active runs someone asked to cancel.
func (s *Store) CancelRequestedActive(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id FROM runs WHERE cancel_requested_at IS NOT NULL
		AND status IN ('queued', 'offering', 'running') ORDER BY queued_at, run_id`)
	if err != nil {
		return nil, fmt.Errorf("list cancel requests: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
