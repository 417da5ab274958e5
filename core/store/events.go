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

// NewEvent is one provider event to append: the event and the provider's
// own optional seq.
type NewEvent struct {
	Event       json.RawMessage
	ProviderSeq *int64
}

// AppendProviderEvents stores evs, in order, in one transaction under the
// broker's epoch: one fence, one dedupe query, one seq reservation and one
// multi-row insert however many events there are. It returns, per event,
// the seq it was stored under, or 0 for an event whose provider seq is
// already stored in this round (a resend; nothing stored for it). Every
// returned event is durable before the call returns (D9). A stale epoch
// changes nothing; the run must exist.
func (s *Store) AppendProviderEvents(ctx context.Context, epoch int64, runID string, evs []NewEvent) ([]int, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var seqs []int
	err := s.inTx(ctx, "append events to run "+runID, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		var err error
		seqs, err = appendProviderEvents(ctx, tx, runID, evs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

// appendProviderEvents stores evs inside a fenced transaction; see
// AppendProviderEvents.
func appendProviderEvents(ctx context.Context, tx pgx.Tx, runID string, evs []NewEvent) ([]int, error) {
	seqs := make([]int, len(evs))
	var pseqs []int64
	for _, e := range evs {
		if e.ProviderSeq != nil {
			pseqs = append(pseqs, *e.ProviderSeq)
		}
	}
	stored := map[int64]bool{}
	if len(pseqs) > 0 {
		// Within this round only: a reopened run is numbered afresh. One
		// index probe of (run_id, provider_seq) per provider seq of the
		// batch: the LATERAL … LIMIT 1 keeps the planner from scanning the
		// run's events instead (a filter over every event stored this round,
		// which grew with the run: ~100 ms per 700-event batch at 20,000
		// events, where the probes take ~1 ms however long the run is).
		rows, err := tx.Query(ctx, `SELECT p.s FROM runs r, unnest($2::bigint[]) AS p(s),
			LATERAL (SELECT 1 FROM run_events e WHERE e.run_id = r.run_id AND e.provider_seq = p.s AND e.seq > r.round_seq LIMIT 1) AS hit
			WHERE r.run_id = $1`, runID, pseqs)
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, err
		}
		for _, p := range got {
			stored[p] = true
		}
	}
	keep := make([]int, 0, len(evs)) // indexes of evs to store
	for i, e := range evs {
		if e.ProviderSeq != nil {
			if stored[*e.ProviderSeq] {
				continue
			}
			stored[*e.ProviderSeq] = true // a repeat within the batch is a resend too
		}
		keep = append(keep, i)
	}
	if len(keep) == 0 {
		return seqs, nil
	}
	var last int
	err := tx.QueryRow(ctx, `UPDATE runs SET last_seq = last_seq + $2, last_activity_at = now()
		WHERE run_id = $1 RETURNING last_seq`, runID, len(keep)).Scan(&last)
	if err == pgx.ErrNoRows {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	first := last - len(keep) + 1
	nums := make([]int32, len(keep))
	texts := make([]string, len(keep))
	ps := make([]*int64, len(keep))
	for j, i := range keep {
		seqs[i] = first + j
		nums[j] = int32(first + j)
		texts[j] = string(evs[i].Event)
		ps[j] = evs[i].ProviderSeq
	}
	_, err = tx.Exec(ctx, `INSERT INTO run_events (run_id, seq, event, provider_seq)
		SELECT $1, s, e::json, p FROM unnest($2::int[], $3::text[], $4::bigint[]) AS t(s, e, p)`,
		runID, nums, texts, ps)
	return seqs, err
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
