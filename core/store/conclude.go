package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// Conclusion is a broker write that ends a round of a run in one
// transaction: events appended first (a synthesized RUN_ERROR, say), then
// the status move, then the agent's messages folded from the round's events.
type Conclusion struct {
	Move Move // Writer must be ByBroker
	// Claim moves the run to running first (the provider's accept: a new
	// round begins), so a claim, the events sent right behind it and, when
	// Move.To is not running, the run's end are one transaction. With
	// Move.To running the write is the claim and its events alone.
	Claim bool
	// ProviderEvents are the provider's last events, stored first, as
	// AppendProviderEvents would (resends skipped): a run's final batch
	// and its end in one transaction.
	ProviderEvents []NewEvent
	Events         []json.RawMessage // appended before the move, in order (after ProviderEvents)
	AgentMessages  []Message         // recorded on the run's thread, origin agent
	// CancelOutranks marks a failure the finish funnel chose because no
	// cancel was known (design.md §The status machine: a requested cancel
	// comes before a failure): when the locked row holds a cancel request
	// — the door recorded it before this end, its notice not yet read —
	// the run is cancelled instead, without Events (funduq's RUN_ERROR).
	CancelOutranks bool
	// WriteKey makes the conclusion safe to repeat (NewWriteKey, one per
	// logical write): a repeat of one that committed before its answer
	// was lost changes nothing and answers as the first attempt did.
	WriteKey string
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
	if m.To == run.Running && !c.Claim {
		return Run{}, nil, fmt.Errorf("conclude run %s: running is written by a claim", m.RunID)
	}
	if (m.To == run.Failed) != (m.Reason != "") {
		return Run{}, nil, fmt.Errorf("conclude run %s: a failure reason is required for failed and only for failed", m.RunID)
	}
	if err := s.faults.Load().refuseConclude(c); err != nil {
		return Run{}, nil, fmt.Errorf("conclude run %s (injected): %w", m.RunID, err)
	}
	var out Run
	var appended []Appended
	var rd eventsRead
	events := c.Events
	err := s.pipelined(ctx, fmt.Sprintf("conclude run %s as %s", m.RunID, m.To),
		func(b *pgx.Batch) {
			rd = eventsRead{}
			// Lock the row and read its status first, so events are only
			// appended to a run the move will apply to.
			rd.queueLock(b, m.RunID)
			if !c.Claim { // a claim's round has nothing stored yet
				rd.queueDedupe(b, m.RunID, c.ProviderEvents)
			}
		},
		func() error {
			if err := rd.check(m.Epoch); err != nil {
				return err
			}
			if rd.wrote(c.WriteKey) {
				return errWritten
			}
			m, events = c.Move, c.Events
			if c.CancelOutranks && m.To == run.Failed && rd.cancelRequested {
				m.To, m.Reason, events = run.Cancelled, "", nil
			}
			if !c.Claim && rd.taken(c.ProviderEvents) {
				return ErrSeqTaken
			}
			if c.Claim {
				if !run.Legal(m.Writer, run.Status(rd.status), run.Running) {
					return &TransitionError{RunID: m.RunID, From: run.Status(rd.status), To: run.Running, Writer: m.Writer}
				}
				if m.To != run.Running && !run.Legal(m.Writer, run.Running, m.To) {
					return &TransitionError{RunID: m.RunID, From: run.Running, To: m.To, Writer: m.Writer}
				}
				return nil
			}
			if !run.Legal(m.Writer, run.Status(rd.status), m.To) {
				return &TransitionError{RunID: m.RunID, From: run.Status(rd.status), To: m.To, Writer: m.Writer}
			}
			return nil
		},
		func(b *pgx.Batch) {
			appended = appended[:0]
			ins := eventInsert{last: rd.lastSeq}
			seqs := ins.add(rd, c.ProviderEvents)
			for i, seq := range seqs {
				if seq > 0 {
					appended = append(appended, Appended{Seq: seq, Event: c.ProviderEvents[i].Event})
				}
			}
			for _, ev := range events {
				seq := ins.push(ev, nil)
				seqs = append(seqs, seq)
				appended = append(appended, Appended{Seq: seq, Event: ev})
			}
			var writeSeqs []int32
			if c.WriteKey != "" {
				writeSeqs = int32s(seqs)
			}
			ins.queue(b, m.RunID)
			// The run's row and its thread's activity in one statement; a
			// claim starts the round, before this write's events.
			b.Queue(`
			WITH t AS (UPDATE threads SET last_activity_at = now() WHERE thread_id = $8)
			UPDATE runs SET
				status = $2,
				failure_reason = nullif($3, ''),
				failure_by_provider = $2 = 'failed' AND $12,
				interrupt = CASE WHEN $2 = 'input-required' THEN $4::jsonb ELSE NULL END,
				owner_epoch = $5,
				last_seq = $6,
				started_at = CASE WHEN $7 THEN now() ELSE started_at END,
				round_seq = CASE WHEN $7 THEN $9 ELSE round_seq END,
				completed_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() ELSE completed_at END,
				last_activity_at = now(),
				-- The KYOK binding dies with the run, in the same write.
				kyok_binding = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_binding END,
				kyok_llm_provider_key = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_llm_provider_key END,
				kyok_llm_name = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN NULL ELSE kyok_llm_name END,
				write_key = coalesce($10, write_key),
				write_seqs = CASE WHEN $10 IS NULL THEN write_seqs ELSE $11 END
			WHERE run_id = $1
			RETURNING `+runColumns,
				m.RunID, string(m.To), string(m.Reason), nullJSON(m.Interrupt), m.Epoch, ins.last,
				c.Claim, rd.threadID, rd.lastSeq, nullText(c.WriteKey), writeSeqs, m.ReasonByProvider).QueryRow(func(row pgx.Row) (err error) {
				out, err = scanRun(row)
				return err
			})
			queueMessages(b, rd.threadID, m.RunID, "agent", c.AgentMessages)
		})
	if errors.Is(err, errWritten) {
		// An earlier attempt of this conclusion committed: answer as it
		// would have, from the record.
		out, err = s.GetRun(ctx, m.RunID)
		if err != nil {
			return Run{}, nil, err
		}
		appended = appended[:0]
		evs := make([]json.RawMessage, 0, len(c.ProviderEvents)+len(c.Events))
		for _, e := range c.ProviderEvents {
			evs = append(evs, e.Event)
		}
		evs = append(evs, events...)
		for i, seq := range rd.writeSeqs {
			if seq > 0 && i < len(evs) {
				appended = append(appended, Appended{Seq: seq, Event: evs[i]})
			}
		}
		return out, appended, nil
	}
	if err != nil {
		return Run{}, nil, err
	}
	return out, appended, nil
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
