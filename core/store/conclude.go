package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// Conclusion is a broker write that ends a round of a run in one
// transaction: events appended first (a synthesized RUN_ERROR, say), then
// the status move, then the agent's messages folded from the round's events.
type Conclusion struct {
	Move Move // Writer must be ByBroker
	// ProviderEvents are the provider's last events, stored first, as
	// AppendProviderEvents would (resends skipped): a run's final batch
	// and its end in one transaction.
	ProviderEvents []NewEvent
	Events         []json.RawMessage // appended before the move, in order (after ProviderEvents)
	AgentMessages  []Message         // recorded on the run's thread, origin agent
}

// Appended is one event Conclude stored.
type Appended struct {
	Seq   int
	Event json.RawMessage
}

// Conclude applies c under the broker's epoch, all or nothing. A terminal
// move drops the run's KYOK binding in the same write. A refused
// move (stale epoch, illegal transition) stores none of the events either.
func (s *Store) Conclude(ctx context.Context, c Conclusion) (Run, []Appended, error) {
	m := c.Move
	if m.Writer != run.ByBroker || m.Epoch <= 0 {
		return Run{}, nil, fmt.Errorf("conclude run %s: only the broker concludes, under its epoch", m.RunID)
	}
	from := run.LegalFrom(m.Writer, m.To)
	if from == nil {
		return Run{}, nil, &TransitionError{RunID: m.RunID, To: m.To, Writer: m.Writer}
	}
	if (m.To == run.Failed) != (m.Reason != "") {
		return Run{}, nil, fmt.Errorf("conclude run %s: a failure reason is required for failed and only for failed", m.RunID)
	}
	var out Run
	var appended []Appended
	err := s.inTx(ctx, fmt.Sprintf("conclude run %s as %s", m.RunID, m.To), func(tx pgx.Tx) error {
		appended = appended[:0]
		if err := fence(ctx, tx, m.Epoch); err != nil {
			return err
		}
		// Lock the row and check the status first, so events are only
		// appended to a run the move will apply to.
		var found, threadID string
		err := tx.QueryRow(ctx, `SELECT status, thread_id FROM runs WHERE run_id = $1 FOR UPDATE`, m.RunID).Scan(&found, &threadID)
		if err == pgx.ErrNoRows {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if !run.Legal(m.Writer, run.Status(found), m.To) {
			return &TransitionError{RunID: m.RunID, From: run.Status(found), To: m.To, Writer: m.Writer}
		}
		if len(c.ProviderEvents) > 0 {
			seqs, err := appendProviderEvents(ctx, tx, m.RunID, c.ProviderEvents)
			if err != nil {
				return err
			}
			for i, seq := range seqs {
				if seq > 0 {
					appended = append(appended, Appended{Seq: seq, Event: c.ProviderEvents[i].Event})
				}
			}
		}
		for _, ev := range c.Events {
			seq, err := appendEvent(ctx, tx, m.RunID, ev, nil)
			if err != nil {
				return err
			}
			appended = append(appended, Appended{Seq: seq, Event: ev})
		}
		r, err := scanRun(tx.QueryRow(ctx, `
			UPDATE runs SET
				status = $2,
				failure_reason = nullif($3, ''),
				interrupt = CASE WHEN $2 = 'input-required' THEN $4::jsonb ELSE NULL END,
				owner_epoch = $5,
				completed_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() ELSE completed_at END,
				last_activity_at = now(),
				-- The KYOK binding dies with the run, in the same write.
				kyok_binding = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_binding END,
				kyok_llm_provider_key = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_llm_provider_key END,
				kyok_llm_name = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_llm_name END
			WHERE run_id = $1
			RETURNING `+runColumns,
			m.RunID, string(m.To), string(m.Reason), nullJSON(m.Interrupt), m.Epoch))
		if err != nil {
			return err
		}
		for _, msg := range c.AgentMessages {
			if _, err := tx.Exec(ctx, `
				INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
				VALUES ($1, $2, $3, $4::json, 'agent')
				ON CONFLICT (thread_id, message_id) DO NOTHING`, threadID, m.RunID, msg.MessageID, string(msg.Message)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE threads SET last_activity_at = now() WHERE thread_id = $1`, threadID); err != nil {
			return err
		}
		out = r
		return nil
	})
	if err != nil {
		return Run{}, nil, err
	}
	return out, appended, nil
}

// appendEvent allocates the run's next seq and stores ev (inside a fenced tx).
func appendEvent(ctx context.Context, tx pgx.Tx, runID string, ev json.RawMessage, providerSeq *int64) (int, error) {
	var seq int
	err := tx.QueryRow(ctx, `UPDATE runs SET last_seq = last_seq + 1, last_activity_at = now()
		WHERE run_id = $1 RETURNING last_seq`, runID).Scan(&seq)
	if err == pgx.ErrNoRows {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO run_events (run_id, seq, event, provider_seq) VALUES ($1, $2, $3::json, $4)`,
		runID, seq, string(ev), providerSeq)
	return seq, err
}
