package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one stored run event.
type Event struct {
	RunID     string
	Seq       int
	Event     json.RawMessage
	CreatedAt time.Time
}

// AppendEvent stores one event of a run under the broker's epoch and returns
// its seq (1, 2, 3… per run). It is durable before the caller publishes it
// anywhere (D9). The run must exist; a stale epoch changes nothing.
func (s *Store) AppendEvent(ctx context.Context, epoch int64, runID string, event json.RawMessage) (int, error) {
	return s.AppendProviderEvent(ctx, epoch, runID, event, nil)
}

// ErrDuplicateEvent: an event with this provider seq is already stored for
// the run (a resend after a reconnect, D7); nothing was stored.
var ErrDuplicateEvent = errors.New("event already stored")

// AppendProviderEvent is AppendEvent with the provider's own optional seq,
// stored so a resent event is recognised (ErrDuplicateEvent).
func (s *Store) AppendProviderEvent(ctx context.Context, epoch int64, runID string, event json.RawMessage, providerSeq *int64) (int, error) {
	var seq int
	err := s.inTx(ctx, "append event to run "+runID, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		if providerSeq != nil {
			var dup bool
			// Within this round only: a reopened run is numbered afresh.
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_events e JOIN runs r USING (run_id)
				WHERE e.run_id = $1 AND e.provider_seq = $2 AND e.seq > r.round_seq)`,
				runID, *providerSeq).Scan(&dup); err != nil {
				return err
			}
			if dup {
				return ErrDuplicateEvent
			}
		}
		var err error
		seq, err = appendEvent(ctx, tx, runID, event, providerSeq)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// EventsAfter reads a run's events with seq > after, in order.
func (s *Store) EventsAfter(ctx context.Context, runID string, after, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id, seq, event, created_at FROM run_events
		WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of run %s: %w", runID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var b []byte
		err := row.Scan(&e.RunID, &e.Seq, &b, &e.CreatedAt)
		e.Event = b
		return e, err
	})
}
