package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// Move asks for one status write. The legal from-statuses come from the
// status machine in package run, never from the caller, so no writer can
// widen them.
type Move struct {
	RunID  string
	To     run.Status
	Writer run.Writer
	// Epoch is the broker's leader epoch; required when Writer is ByBroker,
	// ignored for doors.
	Epoch int64
	// Reason is required when To is failed and refused otherwise.
	Reason run.Reason
	// ReasonByProvider says Reason is the provider's own words (its
	// refusal's reason, its RUN_ERROR's code) rather than funduq's; stored
	// beside it (design.md §The operator console). Only a run's end
	// (Conclude) writes it: Transition refuses it.
	ReasonByProvider bool
	// Interrupt is the pause payload stored with input-required.
	Interrupt json.RawMessage
	// RunInput, when set on a door's reopen (input-required → queued),
	// replaces the stored input with the resumed one.
	RunInput json.RawMessage
	// Lazy (broker writes only) commits without waiting for the WAL flush
	// (synchronous_commit off): the write is visible at once and fenced as any other, and it
	// becomes durable with the next synchronous commit — so only a
	// PostgreSQL crash can lose it. For the broker's offering and requeue
	// writes, which a takeover reads back as queued either way (D7).
	Lazy bool
	// Brief returns only the run's id, thread and status: for a writer
	// that needs no more (the broker's lanes), not the whole row and input.
	Brief bool
}

// Transition applies m if, and only if, the run is in a status m.To may be
// written from by m.Writer and (for the broker) m.Epoch still leads. It
// returns the run as written. A refused write changes nothing and returns a
// *TransitionError (the status found), a *StaleEpochError, or ErrNotFound.
func (s *Store) Transition(ctx context.Context, m Move) (Run, error) {
	what := fmt.Sprintf("run %s: move to %s", m.RunID, m.To)
	from := run.LegalFrom(m.Writer, m.To)
	if from == nil {
		return Run{}, fmt.Errorf("%s: %w", what, &TransitionError{RunID: m.RunID, To: m.To, Writer: m.Writer})
	}
	if (m.To == run.Failed) != (m.Reason != "") {
		return Run{}, fmt.Errorf("%s: a failure reason is required for failed and only for failed", what)
	}
	if m.ReasonByProvider {
		return Run{}, fmt.Errorf("%s: a provider's reason is written only by the run's end", what)
	}
	if m.Writer == run.ByBroker && m.Epoch <= 0 {
		return Run{}, fmt.Errorf("%s: a broker write needs its leader epoch", what)
	}
	var epoch *int64
	if m.Writer == run.ByBroker {
		epoch = &m.Epoch
	}
	// One statement, one round trip: the fence is a locking read of the
	// leader row inside it (held to the statement's end, as fence holds it
	// to a transaction's), so a takeover's epoch write waits for it.
	args := []any{m.RunID, string(m.To), statusStrings(from), string(m.Reason), nullJSON(m.Interrupt), nullJSON(m.RunInput), epoch}
	fenced, lazy, brief := 0, 0, 0
	if epoch != nil {
		fenced = 1
		if m.Lazy {
			lazy = 1
		}
	}
	scan := scanRun
	if m.Brief {
		brief, scan = 1, scanBrief
	}
	q := transitionSQL[fenced][lazy][brief]
	var out Run
	err := s.retry(ctx, what, func() error {
		r, err := scan(s.pool.QueryRow(ctx, q, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			return s.whyNoMove(ctx, m)
		}
		out = r
		return err
	})
	if err != nil {
		return Run{}, err
	}
	s.log.DebugContext(ctx, "run status written", "run_id", out.RunID, "thread_id", out.ThreadID,
		"status", string(out.Status), "writer", m.Writer.String(), "epoch", m.Epoch)
	return out, nil
}

const transitionSet = `
	status = $2,
	failure_reason = nullif($4, ''),
	interrupt = CASE WHEN $2 = 'input-required' THEN $5::jsonb ELSE NULL END,
	run_input = coalesce($6::json, run_input),
	owner_epoch = coalesce($7, owner_epoch),
	started_at = CASE WHEN $2 = 'running' THEN now() ELSE started_at END,
	round_seq = CASE WHEN $2 = 'running' THEN last_seq ELSE round_seq END,
	completed_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() ELSE completed_at END,
	queued_at = CASE WHEN $2 = 'queued' AND status = 'input-required' THEN now() ELSE queued_at END,
	holding_counted = holding_counted AND NOT ($2 = 'queued' AND status = 'input-required'),
	last_activity_at = now()`

// transitionSQL[fenced][lazy][brief] is the one statement a move is. The
// fence is a locking read of the leader row inside it; a lazy one's own
// (implicit) transaction commits without waiting for the WAL flush
// (set_config(…, true) is local to that transaction); a brief one returns
// only the run's id, thread and status.
var transitionSQL = func() (q [2][2][2]string) {
	for f := range 2 {
		for l := range 2 {
			for b := range 2 {
				var with []string
				where := `WHERE run_id = $1 AND status = ANY($3)`
				if l == 1 {
					with = append(with, `lazy AS (SELECT set_config('synchronous_commit', 'off', true) AS v)`)
					where += ` AND EXISTS (SELECT 1 FROM lazy WHERE v = 'off')`
				}
				if f == 1 {
					with = append(with, `lead AS (`+fenceSQL+`)`)
					where += ` AND EXISTS (SELECT 1 FROM lead WHERE epoch = $7::bigint)`
				}
				stmt := ""
				if len(with) > 0 {
					stmt = "WITH " + strings.Join(with, ",\n\t") + "\n"
				}
				ret := runColumns
				if b == 1 {
					ret = briefRunColumns
				}
				q[f][l][b] = stmt + `UPDATE runs SET` + transitionSet + "\n" + where + "\nRETURNING " + ret
			}
		}
	}
	return q
}()

// briefRunColumns is what a brief move returns (scanBrief reads it).
const briefRunColumns = `run_id, thread_id, status`

func scanBrief(row pgx.Row) (Run, error) {
	var r Run
	var status string
	err := row.Scan(&r.RunID, &r.ThreadID, &status)
	r.Status = run.Status(status)
	return r, err
}

// whyNoMove says why a move matched nothing, from what is there now: a
// stale epoch, a missing run, or a status the move may not leave.
func (s *Store) whyNoMove(ctx context.Context, m Move) error {
	var current *int64
	var found *string
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT epoch FROM broker_leader WHERE id = 1),
		(SELECT status FROM runs WHERE run_id = $1)`, m.RunID).Scan(&current, &found); err != nil {
		return err
	}
	if m.Writer == run.ByBroker && (current == nil || *current != m.Epoch) {
		cur := int64(0)
		if current != nil {
			cur = *current
		}
		return &StaleEpochError{Have: m.Epoch, Current: cur}
	}
	if found == nil {
		return ErrNotFound
	}
	return &TransitionError{RunID: m.RunID, From: run.Status(*found), To: m.To, Writer: m.Writer}
}

func statusStrings(ss []run.Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// nullJSON turns an empty raw message into SQL NULL.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
