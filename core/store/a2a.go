package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queries the A2A door needs beyond the AG-UI door's: a task's history (the
// thread messages one run recorded) and a context's tasks (a thread's runs
// of one agent).

// RunMessage is one thread message recorded by a run.
type RunMessage struct {
	MessageID string
	Message   json.RawMessage
	Origin    string // "caller" or "agent"
	CreatedAt time.Time
}

// RunMessages returns the thread messages recorded by run runID (the
// caller's, and the agent's folded replies), oldest first.
func (s *Store) RunMessages(ctx context.Context, runID string) ([]RunMessage, error) {
	rows, err := s.pool.Query(ctx, runMessagesSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("messages of run %s: %w", runID, err)
	}
	out, err := collectRunMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("messages of run %s: %w", runID, err)
	}
	return out, nil
}

const runMessagesSQL = `SELECT message_id, message, origin, created_at FROM thread_messages
		WHERE run_id = $1 ORDER BY id`

func collectRunMessages(rows pgx.Rows) ([]RunMessage, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunMessage, error) {
		var m RunMessage
		var b []byte
		err := row.Scan(&m.MessageID, &b, &m.Origin, &m.CreatedAt)
		m.Message = b
		return m, err
	})
}

// ThreadRuns returns the runs of thread threadID that belong to the agent
// (providerKey, agentName), oldest first.
func (s *Store) ThreadRuns(ctx context.Context, threadID, providerKey, agentName string) ([]Run, error) {
	rows, err := s.pool.Query(ctx, threadRunsSQL, threadID, providerKey, agentName)
	if err != nil {
		return nil, fmt.Errorf("runs of thread %s: %w", threadID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
	if err != nil {
		return nil, fmt.Errorf("runs of thread %s: %w", threadID, err)
	}
	return out, nil
}

// threadRunsSQL checks the agent on the thread's row, not on each run's:
// every run of a thread is its thread's agent's (CreateRun refuses another
// with ErrThreadMismatch), and with no agent columns on runs in the
// predicate the planner cannot pick the agent's index and filter all of
// its runs, which it did on a database without statistics.
const threadRunsSQL = `SELECT ` + runColumns + ` FROM runs
		WHERE thread_id = $1
		AND EXISTS (SELECT 1 FROM threads WHERE thread_id = $1 AND provider_key = $2 AND agent_name = $3)
		ORDER BY created_at, run_id`

// TaskPage names one page of a context's tasks (ContextTasks): the runs
// of a thread of one agent, newest activity first, then by run id, both
// descending.
type TaskPage struct {
	ThreadID, ProviderKey, AgentName string
	// Filter keeps only runs in Statuses (none, when empty).
	Filter   bool
	Statuses []string
	// ActiveAfter, when set, keeps runs active after it.
	ActiveAfter time.Time
	// After, when HasAfter, starts the page after the run with that
	// (last activity, run id): the last one the previous page showed.
	HasAfter    bool
	AfterActive time.Time
	AfterRunID  string
	Limit       int
}

// ContextTasks reads one page of a context's tasks and how many match
// (without the cursor): the page is ordered and cut in the database, so a
// long context costs one page, not all of its runs (each with its input).
func (s *Store) ContextTasks(ctx context.Context, q TaskPage) ([]Run, int, error) {
	var statuses any
	if q.Filter {
		statuses = q.Statuses
		if q.Statuses == nil {
			statuses = []string{}
		}
	}
	var after any
	if !q.ActiveAfter.IsZero() {
		after = q.ActiveAfter
	}
	var curAt any
	if q.HasAfter {
		curAt = q.AfterActive
	}
	var runs []Run
	total := 0
	b := &pgx.Batch{}
	b.Queue(`SELECT `+runColumns+` FROM runs `+contextTasksWhere+`
		AND ($6::timestamptz IS NULL OR (last_activity_at, run_id) < ($6, $7))
		ORDER BY last_activity_at DESC, run_id DESC LIMIT $8`,
		q.ThreadID, q.ProviderKey, q.AgentName, statuses, after, curAt, q.AfterRunID, q.Limit).Query(func(rows pgx.Rows) (err error) {
		runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
		return err
	})
	b.Queue(`SELECT count(*) FROM runs `+contextTasksWhere, q.ThreadID, q.ProviderKey, q.AgentName, statuses, after).
		QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, 0, fmt.Errorf("tasks of context %s: %w", q.ThreadID, err)
	}
	return runs, total, nil
}

// contextTasksWhere is threadRunsSQL's predicate with ListTasks' filters.
const contextTasksWhere = `WHERE thread_id = $1
		AND EXISTS (SELECT 1 FROM threads WHERE thread_id = $1 AND provider_key = $2 AND agent_name = $3)
		AND ($4::text[] IS NULL OR status = ANY($4))
		AND ($5::timestamptz IS NULL OR last_activity_at > $5)`

// RunRecord is a run as read with (a page of) what it recorded.
type RunRecord struct {
	Run      Run
	Events   []Event      // the page of events asked for, in seq order
	Messages []RunMessage // its thread messages, oldest first
	// Rechecked is the run's row read after its messages, when
	// RecordRead.Recheck asked for it.
	Rechecked *Run
}

// RecordRead names the part of a run's record ReadRecord reads.
type RecordRead struct {
	RunID string
	// Run reads the run's row first, so that a settled run's events up
	// to its LastSeq are all stored when the events are read after it.
	Run bool
	// After, UpTo and Limit page the events: at most Limit of those with
	// After < seq <= UpTo (UpTo < 0: no upper bound), in seq order. Limit
	// 0 reads none. The next page is EventsBetween from the last seq read.
	After, UpTo, Limit int
	// Recheck reads the run's row again after its messages: a round's end
	// and its agent messages commit together, so messages that hold a
	// round's reply are read with that round's end seen in Rechecked.
	Recheck bool
}

// ReadRecord reads what q names — the run, one bounded page of its events,
// its thread messages — in one round trip (one implicit transaction): what
// an A2A task view is built from, a page at a time (keyset pages on
// (run_id, seq)), so no read of a long run is unbounded. ErrNotFound for an
// unknown run when q.Run.
func (s *Store) ReadRecord(ctx context.Context, q RecordRead) (RunRecord, error) {
	var rec RunRecord
	b := &pgx.Batch{}
	if q.Run {
		b.Queue(`SELECT `+runColumns+` FROM runs WHERE run_id = $1`, q.RunID).QueryRow(func(row pgx.Row) (err error) {
			rec.Run, err = scanRun(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return err
		})
	}
	if q.Limit > 0 && (q.UpTo < 0 || q.UpTo > q.After) {
		b.Queue(eventsBetweenSQL, q.RunID, q.After, upper(q.UpTo), q.Limit).Query(func(rows pgx.Rows) (err error) {
			rec.Events, err = collectEvents(rows)
			return err
		})
	}
	b.Queue(runMessagesSQL, q.RunID).Query(func(rows pgx.Rows) (err error) {
		rec.Messages, err = collectRunMessages(rows)
		return err
	})
	if q.Recheck {
		b.Queue(`SELECT `+runColumns+` FROM runs WHERE run_id = $1`, q.RunID).QueryRow(func(row pgx.Row) error {
			r, err := scanRun(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			rec.Rechecked = &r
			return err
		})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return RunRecord{}, fmt.Errorf("read record of run %s: %w", q.RunID, err)
	}
	return rec, nil
}

// EventsBetween reads at most limit of a run's events with after < seq <=
// upTo (upTo < 0: no upper bound), in order: ReadRecord's next page.
func (s *Store) EventsBetween(ctx context.Context, runID string, after, upTo, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, eventsBetweenSQL, runID, after, upper(upTo), limit)
	if err != nil {
		return nil, fmt.Errorf("read events of run %s: %w", runID, err)
	}
	return collectEvents(rows)
}

const eventsBetweenSQL = `SELECT run_id, seq, event, created_at FROM run_events
		WHERE run_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4`

// upper is an events page's upper bound as the statement takes it (seq is
// an integer column).
func upper(upTo int) int {
	if upTo < 0 {
		return math.MaxInt32
	}
	return upTo
}
