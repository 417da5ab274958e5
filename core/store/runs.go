package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// Run is a run's row as stored.
type Run struct {
	RunID         string
	ThreadID      string
	ProviderKey   string
	AgentName     string
	Status        run.Status
	FailureReason string // "" unless Status is failed
	// FailureByProvider: FailureReason is the provider's own words (its
	// refusal, its RUN_ERROR), not funduq's — whatever the text says.
	FailureByProvider bool
	RunInput          json.RawMessage // the exact RunAgentInput offered to the provider
	// AddressedRunID is the live run an interjection addresses, as its
	// door wrote it beside RunInput; "" for an ordinary turn.
	AddressedRunID    string
	ParentRunID       string
	ActorChain        json.RawMessage // nil: no chain
	Interrupt         json.RawMessage // the pause payload while input-required
	CallerRequestID   string
	IdempotencyKey    string
	CancelRequestedBy *string // nil: nobody asked; "" an unbound run's anonymous cancel
	OwnerEpoch        int64   // the broker epoch that last wrote it (0: none)
	LastSeq           int
	RoundSeq          int // LastSeq when the provider claimed it this round
	CreatedAt         time.Time
	QueuedAt          time.Time
	StartedAt         *time.Time
	CompletedAt       *time.Time
	LastActivityAt    time.Time
}

const runColumns = `run_id, thread_id, provider_key, agent_name, status, coalesce(failure_reason, ''),
	run_input, coalesce(parent_run_id, ''), actor_chain, interrupt, coalesce(caller_request_id, ''),
	coalesce(idempotency_key, ''), cancel_requested_by, coalesce(owner_epoch, 0), last_seq, round_seq,
	created_at, queued_at, started_at, completed_at, last_activity_at, coalesce(addressed_run_id, ''),
	failure_by_provider`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	if err := scanRunInto(row, &r); err != nil {
		return Run{}, err
	}
	return r, nil
}

// scanRunInto scans runColumns into r, then extra destinations for columns
// a query selects after them.
func scanRunInto(row pgx.Row, r *Run, extra ...any) error {
	var status string
	var input, chain, interrupt []byte
	dest := []any{&r.RunID, &r.ThreadID, &r.ProviderKey, &r.AgentName, &status, &r.FailureReason,
		&input, &r.ParentRunID, &chain, &interrupt, &r.CallerRequestID,
		&r.IdempotencyKey, &r.CancelRequestedBy, &r.OwnerEpoch, &r.LastSeq, &r.RoundSeq,
		&r.CreatedAt, &r.QueuedAt, &r.StartedAt, &r.CompletedAt, &r.LastActivityAt, &r.AddressedRunID,
		&r.FailureByProvider}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return err
	}
	r.Status = run.Status(status)
	r.RunInput = input
	r.ActorChain = chain
	r.Interrupt = interrupt
	return nil
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, runID string) (Run, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE run_id = $1`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, fmt.Errorf("get run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("get run %s: %w", runID, err)
	}
	return r, nil
}
