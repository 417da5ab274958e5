package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/core/run"
)

// NOTIFY channels the doors signal the broker on. Payloads carry a run id;
// a queued notice also the run as queued when it fits (QueuedPayload), so
// the broker need not read the row back. The row stays the truth: the
// broker's first write to the run is checked against it.
const (
	ChannelRunQueued  = "funduq_run_queued"  // a new run was inserted queued
	ChannelRunCancel  = "funduq_run_cancel"  // a cancel was requested
	ChannelRunResumed = "funduq_run_resumed" // a paused run was reopened
)

// Channels lists every channel the broker listens on.
var Channels = []string{ChannelRunQueued, ChannelRunCancel, ChannelRunResumed}

// Provider is a providers row.
type Provider struct {
	PublicKey   string
	Fingerprint string
	DisplayName string
}

// Agent is an agents row as registered.
type Agent struct {
	ProviderKey        string
	Name               string
	Description        string
	AgentCardExtra     json.RawMessage
	Metadata           json.RawMessage
	TakesInterjections bool
	// FunduqKey is funduq's public identity key as the leader of record
	// published it (Leader.FunduqKey; "" before any has), read with the
	// agent by FindAgent so a door checks the key it signs dispatch hops
	// with at no round trip of its own (design.md §Deployment, "One
	// identity key"). Other reads leave it "".
	FunduqKey string
}

// NewThread describes a thread a door opens along with its first run.
type NewThread struct {
	ParentThreadID string
	HeadKey        string          // the chain head binding the thread; "" = unbound
	PresenterKey   string          // the key that presented that chain (a party of the thread)
	Metadata       json.RawMessage // the caller's bag at creation
}

// Message is one thread message a door records with its run.
type Message struct {
	MessageID string
	Message   json.RawMessage // AG-UI message, id already rewritten to MessageID
}

// NewRun is everything a door writes for a run, in one transaction.
type NewRun struct {
	RunID       string
	ThreadID    string
	ProviderKey string
	AgentName   string
	// CreateThread opens ThreadID as a new thread; otherwise ThreadID must
	// exist and belong to the agent.
	CreateThread *NewThread
	// UnlessThread, with CreateThread, is a thread id the caller named and
	// the door did not look up, expecting it unknown: when a thread with
	// that id exists, nothing is written and Admit returns
	// ErrThreadExists (the door then takes the request as one on that
	// thread). The check rides in the insert's first round trip.
	UnlessThread string
	RunInput     json.RawMessage
	// AddressedRunID is the live run an interjection addresses (the same
	// id the builder put in RunInput); "" for an ordinary turn.
	AddressedRunID  string
	ParentRunID     string
	ActorChain      json.RawMessage
	CallerRequestID string // the AG-UI caller's runId or the A2A messageId
	IdempotencyKey  string // the Idempotency-Key header, scoped to its caller by the door
	// RequestHash identifies the request that made the run: a retry naming
	// the same key or caller request id with another hash is refused
	// (ErrKeyReused), never answered with this run.
	RequestHash string
	Messages    []Message
	// Kyok is the run's sealed KYOK binding (core/kyok), written with the
	// run so no agent can call before it exists; nil without an opt-in.
	Kyok *KyokBindingRow
	// MaxQueued, when positive, refuses the run with ErrThreadQueueFull
	// when the existing thread already has that many runs waiting for a
	// provider (queued or offering). The thread row's lock orders the count
	// against concurrent inserts.
	MaxQueued int
}

// ErrThreadQueueFull: the thread has NewRun.MaxQueued runs waiting already.
var ErrThreadQueueFull = errors.New("the thread has too many runs waiting")

// KyokBindingRow is a run's KYOK binding as stored: the offering in the
// clear (no secret) and the sealed binding with the caller's context.
type KyokBindingRow struct {
	LLMProviderKey string
	LLMName        string
	Sealed         []byte
}

// ErrKeyReused: an Idempotency-Key or caller request id names a run made by
// a different request (another RequestHash).
var ErrKeyReused = errors.New("the key was used for a different request")

// ErrThreadMismatch: the thread named belongs to another agent.
var ErrThreadMismatch = errors.New("thread belongs to another agent")

// ErrThreadExists: NewRun.UnlessThread names a thread that exists.
var ErrThreadExists = errors.New("the thread exists")

// ErrThreadGone: the thread the run goes on, or the parent of the thread
// it opens, no longer exists. A door reads both before it admits, so this
// is retention having deleted it in between (FUNDUQ_RETENTION, broker-node
// prune); the door answers as it would have had it read the thread gone.
// It matches ErrNotFound too.
var ErrThreadGone = fmt.Errorf("the thread was deleted since it was read: %w", ErrNotFound)

// CreateRun writes a queued run, its thread (when new) and its caller
// messages, and NOTIFYs the broker, all in one transaction. A retried request
// (same caller request id on the thread, or same idempotency key for the
// agent) creates nothing and returns the original run with created=false.
func (s *Store) CreateRun(ctx context.Context, nr NewRun) (r Run, created bool, err error) {
	a, err := s.Admit(ctx, nr)
	return a.Run, a.Created, err
}

// Admitted is what Admit resolved a door's request to.
type Admitted struct {
	Run
	// Created: this call wrote the run. Otherwise the request is a retry
	// of the one that made (or, for an answer, reopened) Run.
	Created bool
	// After is the seq the run had reached before the request: 0 for a
	// run made by it, the paused round's last seq for a retried answer.
	After int
}

// ErrAgentGone: the agent the run names is no longer registered (its row
// was deleted since the door resolved it).
var ErrAgentGone = errors.New("the agent is no longer registered")

// Admit is CreateRun answering a retry as FindRetriedRun would: the retry
// look-up rides in the insert's transaction (its first round trip), so a
// door need not make it first. Of concurrent attempts of one request
// exactly one writes the run; the others return it with Created false
// (ErrKeyReused when the run was made by another request).
func (s *Store) Admit(ctx context.Context, nr NewRun) (Admitted, error) {
	what := fmt.Sprintf("create run %s on thread %s", nr.RunID, nr.ThreadID)
	var r Run
	// Pipelined: a new thread's run is one round trip (BEGIN, every row,
	// the NOTIFY, COMMIT); a run on an existing thread, or one that may be
	// a retry, two (the thread's check and the retry lookup first).
	var retried Retried
	var found bool
	var pk, name string
	var threadFound, threadExists bool
	var waiting int
	first := func(b *pgx.Batch) {
		found, threadFound, threadExists, waiting = false, false, false, 0
		if nr.CreateThread != nil && nr.UnlessThread != "" {
			b.Queue(`SELECT EXISTS (SELECT 1 FROM threads WHERE thread_id = $1)`, nr.UnlessThread).
				QueryRow(func(row pgx.Row) error { return row.Scan(&threadExists) })
		}
		if q, args := retriedQuery(nr); q != "" {
			b.Queue(q, args...).QueryRow(func(row pgx.Row) error {
				rr, err := scanRetried(row)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				retried, found = rr, err == nil
				return err
			})
		}
		if nr.CreateThread != nil {
			return
		}
		b.Queue(`UPDATE threads SET last_activity_at = now() WHERE thread_id = $1
				RETURNING provider_key, agent_name`, nr.ThreadID).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&pk, &name)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			threadFound = err == nil
			return err
		})
		if nr.MaxQueued > 0 {
			b.Queue(`SELECT count(*) FROM runs WHERE thread_id = $1 AND status IN ('queued', 'offering')`,
				nr.ThreadID).QueryRow(func(row pgx.Row) error { return row.Scan(&waiting) })
		}
	}
	decide := func() error {
		switch {
		case threadExists:
			return fmt.Errorf("thread %s: %w", nr.UnlessThread, ErrThreadExists)
		case found && retried.reused(nr):
			return ErrKeyReused
		case found:
			return errRetried
		case nr.CreateThread != nil:
			return nil
		case !threadFound:
			return fmt.Errorf("thread %s: %w", nr.ThreadID, ErrThreadGone)
		case pk != nr.ProviderKey || name != nr.AgentName:
			return fmt.Errorf("thread %s: %w", nr.ThreadID, ErrThreadMismatch)
		case nr.MaxQueued > 0 && waiting >= nr.MaxQueued:
			return fmt.Errorf("thread %s: %d waiting: %w", nr.ThreadID, waiting, ErrThreadQueueFull)
		}
		return nil
	}
	second := func(b *pgx.Batch) {
		if t := nr.CreateThread; t != nil {
			b.Queue(`
				INSERT INTO threads (thread_id, provider_key, agent_name, parent_thread_id, head_key, metadata, presenter_key)
				VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), coalesce($6::jsonb, '{}'), nullif($7, ''))`,
				nr.ThreadID, nr.ProviderKey, nr.AgentName, t.ParentThreadID, t.HeadKey, nullJSON(t.Metadata), t.PresenterKey)
		}
		b.Queue(`
			INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input, parent_run_id,
			                  actor_chain, caller_request_id, idempotency_key,
			                  kyok_binding, kyok_llm_provider_key, kyok_llm_name, request_hash, addressed_run_id)
			VALUES ($1, $2, $3, $4, 'queued', $5::json, nullif($6, ''), $7::jsonb, nullif($8, ''), nullif($9, ''),
			        $10, nullif($11, ''), nullif($12, ''), nullif($13, ''), nullif($14, ''))
			RETURNING `+runColumns,
			nr.RunID, nr.ThreadID, nr.ProviderKey, nr.AgentName, string(nr.RunInput), nr.ParentRunID,
			nullJSON(nr.ActorChain), nr.CallerRequestID, nr.IdempotencyKey,
			kyokSealed(nr.Kyok), kyokField(nr.Kyok, true), kyokField(nr.Kyok, false), nr.RequestHash, nr.AddressedRunID).QueryRow(func(row pgx.Row) (err error) {
			r, err = scanRun(row)
			return err
		})
		queueMessages(b, nr.ThreadID, nr.RunID, "caller", nr.Messages)
		b.Queue(`SELECT pg_notify($1, $2)`, ChannelRunQueued, QueuedPayload(nr))
	}
	var err error
	if q, _ := retriedQuery(nr); q == "" && nr.CreateThread != nil && nr.UnlessThread == "" {
		err = s.pipelined(ctx, what, nil, nil, second)
	} else {
		err = s.pipelined(ctx, what, first, decide, second)
	}
	if errors.Is(err, errRetried) {
		return Admitted{Run: retried.Run, After: retried.After}, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" &&
		(pgErr.ConstraintName == "runs_caller_request_uq" || pgErr.ConstraintName == "runs_idempotency_uq") {
		// A concurrent retry of the same request won the insert.
		if existing, ok, ferr := s.findRetried(ctx, nr); ferr == nil && ok {
			if existing.reused(nr) {
				return Admitted{}, fmt.Errorf("%s: %w", what, ErrKeyReused)
			}
			return Admitted{Run: existing.Run, After: existing.After}, nil
		}
	}
	if errors.As(err, &pgErr) && pgErr.Code == "23503" && strings.HasSuffix(pgErr.ConstraintName, "provider_key_agent_name_fkey") {
		return Admitted{}, fmt.Errorf("%s: agent %s/%s: %w", what, nr.ProviderKey, nr.AgentName, ErrAgentGone)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName == "threads_parent_thread_id_fkey" {
		return Admitted{}, fmt.Errorf("%s: parent thread %s: %w", what, nr.CreateThread.ParentThreadID, ErrThreadGone)
	}
	if err != nil {
		return Admitted{}, err
	}
	s.log.InfoContext(ctx, "run queued", "run_id", r.RunID, "thread_id", r.ThreadID,
		"provider_key", r.ProviderKey, "agent", r.AgentName)
	return Admitted{Run: r, Created: true}, nil
}

// queueMessages adds msgs to b as one multi-row insert onto the thread, in
// order. An agent's folded message already there (a conclude written
// twice) is kept; a caller's is an error.
func queueMessages(b *pgx.Batch, threadID, runID, origin string, msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	ids := make([]string, len(msgs))
	texts := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i], texts[i] = m.MessageID, string(m.Message)
	}
	q := `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, $2, id, msg::json, $5 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS t(id, msg, n)
		ORDER BY n`
	if origin == "agent" {
		q += ` ON CONFLICT (thread_id, message_id) DO NOTHING`
	}
	b.Queue(q, threadID, runID, ids, texts, origin)
}

// errRetried stops CreateRun's transaction: the request is a retry of one
// that already made its run.
var errRetried = errors.New("request already made its run")

func kyokSealed(k *KyokBindingRow) any {
	if k == nil {
		return nil
	}
	return k.Sealed
}

func kyokField(k *KyokBindingRow, provider bool) string {
	switch {
	case k == nil:
		return ""
	case provider:
		return k.LLMProviderKey
	}
	return k.LLMName
}

// Retried is the run a retried request made, with what the store knows of
// that request: its hash, and for an answer the seq its round starts after.
type Retried struct {
	Run
	RequestHash string
	// After is the seq the run had reached before the request: 0 for a
	// request that made the run, the paused round's last seq for an answer.
	After int
}

// reused: the run was made by a different request than nr.
func (r Retried) reused(nr NewRun) bool {
	return nr.RequestHash != "" && r.RequestHash != "" && nr.RequestHash != r.RequestHash
}

// retriedQuery is the lookup of the run a retried request made, or "" when
// the request carries nothing that identifies a retry. Both branches are
// index look-ups (runs_idempotency_uq; runs_caller_request_uq and the
// answer_requests key).
func retriedQuery(nr NewRun) (string, []any) {
	switch {
	case nr.IdempotencyKey != "" && nr.CreateThread == nil && nr.ThreadID != "":
		// On a thread the key may have opened a run, or answered a paused
		// one (Reopen.IdempotencyKey).
		return `SELECT ` + runColumns + `, x.hash, x.after FROM (
				(SELECT run_id, coalesce(request_hash, '') AS hash, 0 AS after FROM runs
				 WHERE provider_key = $1 AND agent_name = $2 AND idempotency_key = $3)
				UNION ALL
				(SELECT run_id, coalesce(request_hash, ''), after_seq FROM answer_requests
				 WHERE thread_id = $4 AND caller_request_id = $5)
				LIMIT 1) x JOIN runs USING (run_id)`,
			[]any{nr.ProviderKey, nr.AgentName, nr.IdempotencyKey, nr.ThreadID, answerKeyID(nr.IdempotencyKey)}
	case nr.IdempotencyKey != "":
		return `SELECT ` + runColumns + `, coalesce(request_hash, ''), 0 FROM runs
			WHERE provider_key = $1 AND agent_name = $2 AND idempotency_key = $3`,
			[]any{nr.ProviderKey, nr.AgentName, nr.IdempotencyKey}
	case nr.CallerRequestID != "" && nr.CreateThread == nil:
		// The request may have opened a run, or answered a paused one.
		return `SELECT ` + runColumns + `, x.hash, x.after FROM (
				(SELECT run_id, coalesce(request_hash, '') AS hash, 0 AS after FROM runs
				 WHERE thread_id = $1 AND caller_request_id = $2)
				UNION ALL
				(SELECT run_id, coalesce(request_hash, ''), after_seq FROM answer_requests
				 WHERE thread_id = $1 AND caller_request_id = $2)
				LIMIT 1) x JOIN runs USING (run_id)`,
			[]any{nr.ThreadID, nr.CallerRequestID}
	}
	return "", nil
}

// answerKeyID is the answer_requests id of an answer's Idempotency-Key
// (scoped by the door), "" for none: marked apart from caller request ids
// (the AG-UI runId, the A2A messageId), which share the table and the
// door's scoping.
func answerKeyID(idem string) string {
	if idem == "" {
		return ""
	}
	return "idempotency:" + idem
}

func scanRetried(row pgx.Row) (Retried, error) {
	var out Retried
	err := scanRunInto(row, &out.Run, &out.RequestHash, &out.After)
	return out, err
}

func (s *Store) findRetried(ctx context.Context, nr NewRun) (Retried, bool, error) {
	q, args := retriedQuery(nr)
	if q == "" {
		return Retried{}, false, nil
	}
	r, err := scanRetried(s.pool.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Retried{}, false, nil
	}
	if err != nil {
		return Retried{}, false, fmt.Errorf("look up retried request: %w", err)
	}
	return r, true, nil
}

// QueueCursor is where a paged read of the queue stopped: the last run it
// gave, in the queue's order (queued_at, run_id). The zero cursor is the
// queue's head.
type QueueCursor struct {
	QueuedAt time.Time
	RunID    string
}

// QueueCursor is r's place in the queue: the cursor of the page after it.
func (r Run) QueueCursor() QueueCursor { return QueueCursor{QueuedAt: r.QueuedAt, RunID: r.RunID} }

// QueuedRuns lists up to limit runs waiting in queued after the cursor,
// oldest first: the broker's catch-up and takeover read, one bounded page
// at a time (a keyset on runs_active_idx, so a page costs the same however
// deep in the queue it starts).
func (s *Store) QueuedRuns(ctx context.Context, after QueueCursor, limit int) ([]Run, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM runs WHERE status = $1
		AND (queued_at, run_id) > ($2, $3) ORDER BY queued_at, run_id LIMIT $4`,
		string(run.Queued), after.QueuedAt, after.RunID, limit)
	if err != nil {
		return nil, fmt.Errorf("list queued runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) { return scanRun(row) })
}
