package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Thread is a threads row.
type Thread struct {
	ThreadID       string
	ProviderKey    string
	AgentName      string
	ParentThreadID string
	HeadKey        string
	PresenterKey   string // the key that presented the chain binding it ("" when unbound)
	CreatedAt      time.Time
	// CursorKey is the thread's own 32-byte key that seals its snapshot
	// page cursors (design.md §The doors, "A thread snapshot is one
	// bounded page"). Set by the table's default; never sent to anyone.
	CursorKey []byte
}

// GetThread reads one thread.
func (s *Store) GetThread(ctx context.Context, threadID string) (Thread, error) {
	var t Thread
	err := s.pool.QueryRow(ctx, `SELECT thread_id, provider_key, agent_name, coalesce(parent_thread_id, ''),
		coalesce(head_key, ''), coalesce(presenter_key, ''), created_at, cursor_key FROM threads WHERE thread_id = $1`, threadID).
		Scan(&t.ThreadID, &t.ProviderKey, &t.AgentName, &t.ParentThreadID, &t.HeadKey, &t.PresenterKey, &t.CreatedAt, &t.CursorKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Thread{}, fmt.Errorf("thread %s: %w", threadID, ErrNotFound)
	}
	if err != nil {
		return Thread{}, fmt.Errorf("thread %s: %w", threadID, err)
	}
	return t, nil
}

// ErrTooLarge is returned by ThreadMessagesWithin when the messages asked
// for exceed its byte bound.
var ErrTooLarge = errors.New("too large for one answer")

// ThreadMessagesWithin is ThreadMessages that reads at most about maxBytes
// of messages (as stored): the newest first, stopping with ErrTooLarge as
// soon as they exceed it, so a long thread is never read whole to be
// refused.
func (s *Store) ThreadMessagesWithin(ctx context.Context, threadID string, limit, maxBytes int) ([]json.RawMessage, error) {
	lim := any(limit)
	if limit <= 0 {
		lim = nil // LIMIT NULL is no limit
	}
	rows, err := s.pool.Query(ctx, `SELECT message FROM thread_messages WHERE thread_id = $1 ORDER BY id DESC LIMIT $2`, threadID, lim)
	if err != nil {
		return nil, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	defer rows.Close()
	var msgs []json.RawMessage
	total := 0
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("messages of thread %s: %w", threadID, err)
		}
		total += len(b) + 1 // and its comma
		if total > maxBytes {
			return nil, fmt.Errorf("messages of thread %s: %w", threadID, ErrTooLarge)
		}
		msgs = append(msgs, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	slices.Reverse(msgs)
	return msgs, nil
}

// ThreadMessages returns a thread's messages oldest first; limit > 0 keeps
// only the last limit of them.
func (s *Store) ThreadMessages(ctx context.Context, threadID string, limit int) ([]json.RawMessage, error) {
	q := `SELECT message FROM (SELECT id, message FROM thread_messages WHERE thread_id = $1 ORDER BY id DESC LIMIT $2) m ORDER BY id`
	lim := any(limit)
	if limit <= 0 {
		lim = nil // LIMIT NULL is no limit
	}
	rows, err := s.pool.Query(ctx, q, threadID, lim)
	if err != nil {
		return nil, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (json.RawMessage, error) {
		var b []byte
		err := row.Scan(&b)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	return msgs, nil
}

// MessagePage is one page of a thread's messages, newest pages first
// (ThreadMessagePage).
type MessagePage struct {
	// Messages are the page's messages in thread order (oldest first).
	Messages []json.RawMessage
	// Omitted are messages of the page larger than the whole page bound:
	// named here rather than sent or silently left out.
	Omitted []OmittedMessage
	// More reports older messages than the page's; Before is then the
	// position to read the next (older) page from.
	More   bool
	Before int64
}

// OmittedMessage is a message too large for any page.
type OmittedMessage struct {
	MessageID string
	Bytes     int
}

// ThreadMessagePage reads the newest messages of a thread older than
// position before (0: from the newest), at most limit of them and at most
// maxBytes of them as stored (each with a comma). The bound is applied in
// the database: a row past it is not sent, and a message larger than
// maxBytes alone is named (Omitted) instead of read, so a page never
// holds more than about maxBytes however the thread grew.
func (s *Store) ThreadMessagePage(ctx context.Context, threadID string, before int64, limit, maxBytes int) (MessagePage, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	// The innermost query walks thread_messages_thread_idx backwards from
	// before; the window adds each message's bytes up, newest first; the
	// outer filter stops one row past the bound (that row's message not
	// sent: it tells there is more). A message fits a page only with its
	// comma (n < maxBytes); one that does not is omitted, never counted as
	// past the bound, or a page of it alone would never come.
	rows, err := s.pool.Query(ctx, `SELECT id, message_id, n, CASE WHEN n < $4 AND total <= $4 THEN message END
		FROM (SELECT id, message_id, message, n,
				sum(CASE WHEN n < $4 THEN n + 1 ELSE 0 END) OVER (ORDER BY id DESC ROWS UNBOUNDED PRECEDING) AS total
			FROM (SELECT id, message_id, message, octet_length(message::text) AS n
				FROM thread_messages WHERE thread_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3) newest) summed
		WHERE total - CASE WHEN n < $4 THEN n + 1 ELSE 0 END <= $4
		ORDER BY id DESC`, threadID, before, limit+1, maxBytes)
	if err != nil {
		return MessagePage{}, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	defer rows.Close()
	var p MessagePage
	read := 0
	for rows.Next() {
		var (
			id  int64
			mid string
			n   int
			b   []byte
		)
		if err := rows.Scan(&id, &mid, &n, &b); err != nil {
			return MessagePage{}, fmt.Errorf("messages of thread %s: %w", threadID, err)
		}
		switch {
		case read == limit:
			p.More = true
		case b != nil:
			p.Messages = append(p.Messages, b)
		case n >= maxBytes: // with its comma it fits no page
			p.Omitted = append(p.Omitted, OmittedMessage{MessageID: mid, Bytes: n})
		default: // past the bound
			p.More = true
		}
		if p.More {
			break
		}
		read++
		p.Before = id
	}
	if err := rows.Err(); err != nil {
		return MessagePage{}, fmt.Errorf("messages of thread %s: %w", threadID, err)
	}
	if !p.More {
		p.Before = 0
	}
	slices.Reverse(p.Messages)
	slices.Reverse(p.Omitted)
	return p, nil
}

// StoredMessage is a thread message as stored and whose it is: Origin is
// "caller" (a door stored it under an id of funduq's own, the message's
// "id") or "agent" (folded from a run's events, under the agent's own
// ids).
type StoredMessage struct {
	Origin  string
	Message json.RawMessage
}

// ThreadOpening reads a thread's oldest messages, at most limit of them,
// in thread order. ok is false, and nothing is returned, when they hold
// more than maxBytes as stored: the bound is applied in the database (a
// window over the first rows of thread_messages_thread_idx), so a thread
// of large replies is never read to be compared with a small request
// (design.md §The doors, "The history an AG-UI client sends again").
func (s *Store) ThreadOpening(ctx context.Context, threadID string, limit, maxBytes int) (msgs []StoredMessage, ok bool, err error) {
	// The innermost query walks the index forwards; the window adds the
	// messages' bytes up; the outer filter stops one row past the bound,
	// that row's message not sent: it says the bound was reached.
	rows, err := s.pool.Query(ctx, `SELECT origin, CASE WHEN total <= $3 THEN message END
		FROM (SELECT id, origin, message, n,
				sum(n) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS total
			FROM (SELECT id, origin, message, octet_length(message::text) AS n
				FROM thread_messages WHERE thread_id = $1 ORDER BY id LIMIT $2) oldest) summed
		WHERE total - n <= $3
		ORDER BY id`, threadID, limit, maxBytes)
	if err != nil {
		return nil, false, fmt.Errorf("opening messages of thread %s: %w", threadID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var m StoredMessage
		var b []byte
		if err := rows.Scan(&m.Origin, &b); err != nil {
			return nil, false, fmt.Errorf("opening messages of thread %s: %w", threadID, err)
		}
		if b == nil {
			return nil, false, nil
		}
		m.Message = b
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("opening messages of thread %s: %w", threadID, err)
	}
	return msgs, true, nil
}
