package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// ErrNotCancellable: the run is paused (input-required): nobody is working
// on it, so there is nobody to ask to stop (D1).
var ErrNotCancellable = errors.New("run is not cancellable")

// ErrRunEnded: the run already reached a terminal status.
var ErrRunEnded = errors.New("run has already ended")

// RequestCancel records a door's cancel request and NOTIFYs the broker,
// whose lane decides what it means. by is the requesting key ("" for an
// unbound run). A repeated request leaves the first one recorded.
func (s *Store) RequestCancel(ctx context.Context, runID, by string) (Run, error) {
	var out Run
	err := s.inTx(ctx, "request cancel of "+runID, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1 FOR UPDATE`, runID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		switch st := run.Status(status); {
		case st == run.InputRequired:
			return ErrNotCancellable
		case st.Terminal():
			return ErrRunEnded
		}
		r, err := scanRun(tx.QueryRow(ctx, `UPDATE runs SET
				cancel_requested_by = coalesce(cancel_requested_by, $2),
				cancel_requested_at = coalesce(cancel_requested_at, now())
			WHERE run_id = $1 RETURNING `+runColumns, runID, by))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRunCancel, runID); err != nil {
			return err
		}
		out = r
		return nil
	})
	if err != nil {
		return Run{}, fmt.Errorf("cancel run %s: %w", runID, err)
	}
	return out, nil
}
