package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// Queries the caller doors (AG-UI, A2A) need beyond intake: resolving the
// agent a path names, checking a KYOK opt-in, reading a thread's runs for a
// snapshot or an answer, and the door's one reopen of a paused run.

// FindAgent reads the agent (provider, name), where provider is the
// provider's 64-hex public key or its 16-hex fingerprint. ErrNotFound when
// no such agent is registered. The agent's FunduqKey is the leader's
// published key, read in the same statement.
func (s *Store) FindAgent(ctx context.Context, provider, name string) (Agent, error) {
	var a Agent
	var extra, meta []byte
	err := s.pool.QueryRow(ctx, `
		SELECT a.provider_key, a.name, a.description, a.agent_card_extra, a.metadata, a.takes_interjections,
		       coalesce((SELECT l.funduq_key FROM broker_leader l WHERE l.id = 1), '')
		FROM agents a JOIN providers p ON p.public_key = a.provider_key
		WHERE (p.public_key = $1 OR p.fingerprint = $1) AND a.name = $2`, provider, name).
		Scan(&a.ProviderKey, &a.Name, &a.Description, &extra, &meta, &a.TakesInterjections, &a.FunduqKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Agent{}, fmt.Errorf("agent %s/%s: %w", provider, name, ErrNotFound)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("agent %s/%s: %w", provider, name, err)
	}
	a.AgentCardExtra, a.Metadata = extra, meta
	return a, nil
}

// LLMOfferingExists reports whether the KYOK offering (provider key, name)
// is registered (served or not: the doors only check existence).
func (s *Store) LLMOfferingExists(ctx context.Context, providerKey, name string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM llm_offerings WHERE provider_key = $1 AND name = $2)`,
		providerKey, name).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("llm offering %s/%s: %w", providerKey, name, err)
	}
	return ok, nil
}

// NewestRunInStatus returns the thread's newest run (by created_at, then
// run_id) whose status is one of statuses; ok is false when there is none.
func (s *Store) NewestRunInStatus(ctx context.Context, threadID string, statuses ...run.Status) (r Run, ok bool, err error) {
	r, err = scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs
		WHERE thread_id = $1 AND status = ANY($2) ORDER BY created_at DESC, run_id DESC LIMIT 1`,
		threadID, statusStrings(statuses)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("newest run of thread %s: %w", threadID, err)
	}
	return r, true, nil
}

// ThreadRunsInStatus returns up to limit of the thread's runs whose status is
// one of statuses, newest first (by created_at, then run_id), as
// NewestRunInStatus orders them.
func (s *Store) ThreadRunsInStatus(ctx context.Context, threadID string, limit int, statuses ...run.Status) ([]Run, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM runs
		WHERE thread_id = $1 AND status = ANY($2) ORDER BY created_at DESC, run_id DESC LIMIT $3`,
		threadID, statusStrings(statuses), limit)
	if err != nil {
		return nil, fmt.Errorf("runs of thread %s: %w", threadID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("runs of thread %s: %w", threadID, err)
	}
	return out, nil
}

// FindRetriedRun returns the run an earlier attempt of the request nr
// describes created or reopened — same Idempotency-Key for the agent (the
// door scopes it to its caller), or same caller request id on an existing
// thread — exactly as CreateRun would find it. ErrKeyReused when that run
// was made by a request with another RequestHash.
func (s *Store) FindRetriedRun(ctx context.Context, nr NewRun) (Retried, bool, error) {
	r, ok, err := s.findRetried(ctx, nr)
	if err == nil && ok && r.reused(nr) {
		return Retried{}, false, fmt.Errorf("look up retried request: %w", ErrKeyReused)
	}
	return r, ok, err
}

// Reopen is a door's answer to a paused run: the run keeps its id (D1).
type Reopen struct {
	RunID    string
	RunInput []byte // the resumed RunAgentInput, built for the same run id
	// AddressedRunID goes with RunInput (NewRun.AddressedRunID); with no
	// RunInput the stored one stays.
	AddressedRunID string
	Messages       []Message // the answer's caller messages, recorded on the run's thread
	// CallerRequestID is the answer's own request id (A2A messageId); a
	// retry with it finds this run (FindRetriedRun), streamed from the seq
	// the paused round ended on.
	CallerRequestID string
	// IdempotencyKey is the answer's Idempotency-Key as the door scoped it
	// (NewRun.IdempotencyKey). The run's row holds the first request's
	// key, so the answer's is kept beside its request id: a retry carrying
	// the key is looked up by it alone (retriedQuery), and must find this
	// run rather than answer the run's next pause again (D13).
	IdempotencyKey string
	RequestHash    string // see NewRun.RequestHash
}

// ReopenRun moves an input-required run back to queued with its new input,
// records the answer's messages and NOTIFYs store.ChannelRunResumed, all in
// one transaction. The move is the status machine's guarded door write, so
// of racing answers exactly one lands; the others get a *TransitionError
// (ErrIllegalTransition) and nothing is written for them. A cancel asked of
// the round that paused instead is spent: the pause outranked it and the
// answer opens a new round (design.md D1), which it must not cancel. So
// is the round's abandoned or undelivered count: the new round is claimed
// afresh with a whole new window (design.md §Counters).
func (s *Store) ReopenRun(ctx context.Context, ro Reopen) (Run, error) {
	from := run.LegalFrom(run.ByDoor, run.Queued)
	if from == nil {
		return Run{}, fmt.Errorf("reopen run %s: the status machine has no door reopen", ro.RunID)
	}
	var out Run
	err := s.inTx(ctx, "reopen run "+ro.RunID, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `
			UPDATE runs SET
				status = 'queued',
				interrupt = NULL,
				cancel_requested_by = NULL,
				cancel_requested_at = NULL,
				run_input = coalesce($3::json, run_input),
				addressed_run_id = CASE WHEN $3::json IS NULL THEN addressed_run_id ELSE nullif($4, '') END,
				queued_at = now(),
				holding_counted = false,
				last_activity_at = now()
			WHERE run_id = $1 AND status = ANY($2)
			RETURNING `+runColumns,
			ro.RunID, statusStrings(from), nullJSON(ro.RunInput), ro.AddressedRunID))
		if errors.Is(err, pgx.ErrNoRows) {
			var found string
			err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1`, ro.RunID).Scan(&found)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			return &TransitionError{RunID: ro.RunID, From: run.Status(found), To: run.Queued, Writer: run.ByDoor}
		}
		if err != nil {
			return err
		}
		for _, m := range ro.Messages {
			if _, err := tx.Exec(ctx, `
				INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
				VALUES ($1, $2, $3, $4::json, 'caller')`, r.ThreadID, r.RunID, m.MessageID, string(m.Message)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE threads SET last_activity_at = now() WHERE thread_id = $1`, r.ThreadID); err != nil {
			return err
		}
		for _, id := range []string{ro.CallerRequestID, answerKeyID(ro.IdempotencyKey)} {
			if id == "" {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO answer_requests (thread_id, caller_request_id, run_id, request_hash, after_seq)
				VALUES ($1, $2, $3, nullif($4, ''), $5) ON CONFLICT DO NOTHING`,
				r.ThreadID, id, r.RunID, ro.RequestHash, r.LastSeq); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRunResumed, r.RunID); err != nil {
			return err
		}
		out = r
		return nil
	})
	if err != nil {
		return Run{}, fmt.Errorf("reopen run %s: %w", ro.RunID, err)
	}
	s.log.InfoContext(ctx, "paused run reopened", "run_id", out.RunID, "thread_id", out.ThreadID)
	return out, nil
}
