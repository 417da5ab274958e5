package provider_test

import (
	"context"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// Query against a real node: the agent's own thread answers its messages;
// another key's thread and a thread that does not exist get the same
// *QueryError, so a query tells a stranger's thread from no thread at all
// by nothing; neither is "ask again".
func TestOutsideQueryOwnAndForeignThreads(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x4c)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	h.Eventually("registered", c.Connected)
	id, mine := h.Door(s.PublicKeyHex(), "a", "", "hello")
	h.WaitStatus(id, run.Completed)
	stranger := h.Connect(0x4d, nil)
	stranger.Register("b")
	_, theirs := h.Door(stranger.Key, "b", "", "secret")

	msgs, err := c.Query(t.Context(), mine, 0)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("own thread: %d messages, %v", len(msgs), err)
	}
	_, errTheirs := c.Query(t.Context(), theirs, 0)
	_, errNone := c.Query(t.Context(), "thread_00000000000000000000dead", 0)
	var qe1, qe2 *provider.QueryError
	if !errors.As(errTheirs, &qe1) || !errors.As(errNone, &qe2) {
		t.Fatalf("foreign: %v; none: %v; want *QueryError both", errTheirs, errNone)
	}
	if qe1.Message != qe2.Message {
		t.Errorf("a stranger's thread answered %q, no thread %q: told apart", qe1.Message, qe2.Message)
	}
	if errors.Is(errTheirs, provider.ErrQueryAskAgain) {
		t.Errorf("a foreign thread reads as ask-again: %v", errTheirs)
	}
}
