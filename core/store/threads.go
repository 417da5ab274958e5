package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
}

// GetThread reads one thread.
func (s *Store) GetThread(ctx context.Context, threadID string) (Thread, error) {
	var t Thread
	err := s.pool.QueryRow(ctx, `SELECT thread_id, provider_key, agent_name, coalesce(parent_thread_id, ''),
		coalesce(head_key, ''), coalesce(presenter_key, ''), created_at FROM threads WHERE thread_id = $1`, threadID).
		Scan(&t.ThreadID, &t.ProviderKey, &t.AgentName, &t.ParentThreadID, &t.HeadKey, &t.PresenterKey, &t.CreatedAt)
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
