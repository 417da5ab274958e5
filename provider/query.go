package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// QueryError is funduq's answer to a query it could not serve (for example
// "no such thread for this provider").
type QueryError struct {
	Message string
}

func (e *QueryError) Error() string { return "provider: query refused: " + e.Message }

// Is reports a "busy" or "could not read" answer as ErrQueryAskAgain: the
// wire has only funduq's text to tell them from a refusal.
func (e *QueryError) Is(target error) bool {
	return target == ErrQueryAskAgain && (e.Message == wire.QueryBusyMessage || e.Message == wire.QueryUnreadMessage)
}

// Query asks funduq for a thread's messages (method thread_messages): the
// thread's AG-UI messages, oldest first, the last limit of them when limit is
// positive. Only threads of this provider's agents are answered. It waits at
// most QueryTimeout, fails with ErrNotConnected when no link is registered and
// with ErrLinkLost at once if the link drops before the answer.
func (c *Client) Query(ctx context.Context, threadID string, limit int) ([]json.RawMessage, error) {
	params := wire.ThreadMessagesParams{ThreadID: threadID}
	if limit > 0 {
		params.Limit = &limit
	}
	pb, err := wire.Marshal(params)
	if err != nil {
		return nil, err
	}
	id := randomHex(8)
	ch := make(chan wire.QueryResult, 1)

	c.mu.Lock()
	l := c.link
	if l == nil {
		c.mu.Unlock()
		return nil, ErrNotConnected
	}
	l.queries[id] = ch
	c.sendCtrlLocked(l, wire.Query{Type: wire.TypeQuery, QueryID: id, Method: "thread_messages", Params: pb})
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(l.queries, id)
		c.mu.Unlock()
	}()

	t := time.NewTimer(QueryTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		if res.Error != "" {
			return nil, &QueryError{Message: res.Error}
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(res.Result, &msgs); err != nil {
			return nil, fmt.Errorf("provider: queryResult is not a list of messages: %w", err)
		}
		return msgs, nil
	case <-l.dead:
		return nil, ErrLinkLost
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-t.C:
		return nil, ErrQueryTimeout
	}
}

// handleQueryResult hands an answer to the Query waiting for it.
func (c *Client) handleQueryResult(l *link, raw []byte) {
	var res wire.QueryResult
	if err := json.Unmarshal(raw, &res); err != nil {
		c.log.Warn("funduq sent a queryResult that does not parse", "err", err)
		return
	}
	c.mu.Lock()
	if c.syncAnsweredLocked(l, res.QueryID) {
		c.mu.Unlock()
		return
	}
	ch := l.queries[res.QueryID]
	delete(l.queries, res.QueryID)
	c.mu.Unlock()
	if ch == nil {
		c.log.Info("queryResult for no pending query", "query_id", res.QueryID)
		return
	}
	ch <- res // buffered for exactly this answer
}
