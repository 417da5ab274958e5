package provider

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

type queryOutcome struct {
	msgs []json.RawMessage
	err  error
}

func asyncQuery(c *Client, ctx context.Context, thread string, limit int) <-chan queryOutcome {
	ch := make(chan queryOutcome, 1)
	go func() {
		msgs, err := c.Query(ctx, thread, limit)
		ch <- queryOutcome{msgs, err}
	}()
	return ch
}

var queryIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestQueryRoundTrip(t *testing.T) {
	f := newFakeFunduq(t)
	c, p, _ := singleAgent(t, f, newGates().handler)

	out := asyncQuery(c, t.Context(), "t-1", 20)
	_, raw := p.next(t)
	var q wire.Query
	if err := json.Unmarshal(raw, &q); err != nil || q.Type != wire.TypeQuery {
		t.Fatalf("query frame %s", raw)
	}
	if !queryIDPattern.MatchString(q.QueryID) || q.Method != "thread_messages" || string(q.Params) != `{"threadId":"t-1","limit":20}` {
		t.Fatalf("query frame %s", raw)
	}
	// An answer for another query is not this one's.
	p.send(t, wire.QueryResult{Type: wire.TypeQueryResult, QueryID: "0000000000000000", Result: json.RawMessage(`[]`)})
	p.send(t, wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID,
		Result: json.RawMessage(`[{"id":"m1","role":"user","content":"hi"},{"id":"m2","role":"assistant","content":"yo"}]`)})
	got := <-out
	if got.err != nil || len(got.msgs) != 2 || string(got.msgs[1]) != `{"id":"m2","role":"assistant","content":"yo"}` {
		t.Fatalf("Query = %v, %v", got.msgs, got.err)
	}

	// No limit: the key is left out. An error answer is a *QueryError.
	out = asyncQuery(c, t.Context(), "t-2", 0)
	_, raw = p.next(t)
	_ = json.Unmarshal(raw, &q)
	if string(q.Params) != `{"threadId":"t-2"}` {
		t.Fatalf("params %s", q.Params)
	}
	p.send(t, wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID, Error: "no such thread for this provider"})
	var qe *QueryError
	if got := <-out; !errors.As(got.err, &qe) || qe.Message != "no such thread for this provider" {
		t.Fatalf("Query error = %v", got.err)
	}
}

func TestQueryFailsAtOnceWhenTheLinkDrops(t *testing.T) {
	f := newFakeFunduq(t)
	c, p, _ := singleAgent(t, f, newGates().handler)
	out := asyncQuery(c, t.Context(), "t-1", 5)
	p.expect(t, wire.TypeQuery)
	p.drop()
	if got := <-out; !errors.Is(got.err, ErrLinkLost) {
		t.Fatalf("Query = %v", got.err)
	}
}

func TestQueryHonoursItsContext(t *testing.T) {
	f := newFakeFunduq(t)
	c, p, _ := singleAgent(t, f, newGates().handler)
	ctx, cancel := context.WithCancel(t.Context())
	out := asyncQuery(c, ctx, "t-1", 5)
	p.expect(t, wire.TypeQuery)
	cancel()
	if got := <-out; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("Query = %v", got.err)
	}
}

func TestQueryWithoutALink(t *testing.T) {
	c, err := New(Config{BaseURL: "http://127.0.0.1:1", Signer: mustSigner(t, providerSeedHex),
		Agents: []Agent{{Name: "a", Handler: newGates().handler}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(t.Context(), "t-1", 0); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Query = %v", err)
	}
}

// funduq's "ask again" answers — the query budget taken for the query's
// whole time limit, or its read running out of time — are told apart from
// a refusal: a provider retries the one and not the other (design.md §The
// provider wire). They were a *QueryError like "no such thread", and only
// funduq's exact text told them apart.
func TestQueryAskAgainIsToldApart(t *testing.T) {
	f := newFakeFunduq(t)
	c, p, _ := singleAgent(t, f, newGates().handler)
	for _, tc := range []struct {
		answer string
		again  bool
	}{
		{wire.QueryBusyMessage, true},
		{wire.QueryUnreadMessage, true},
		{"no such thread for this provider", false},
	} {
		out := asyncQuery(c, t.Context(), "t-1", 0)
		_, raw := p.next(t)
		var q wire.Query
		_ = json.Unmarshal(raw, &q)
		p.send(t, wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID, Error: tc.answer})
		got := <-out
		var qe *QueryError
		if !errors.As(got.err, &qe) || qe.Message != tc.answer {
			t.Fatalf("answered %q: Query error = %v", tc.answer, got.err)
		}
		if errors.Is(got.err, ErrQueryAskAgain) != tc.again {
			t.Fatalf("answered %q: errors.Is(err, ErrQueryAskAgain) = %v, want %v", tc.answer, !tc.again, tc.again)
		}
	}
}
