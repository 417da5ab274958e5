package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A link answers at most eight queries at a time; a ninth waits, and the
// link is not read meanwhile. An offer accepted in time behind that ninth
// query (the database slow to answer the eight) waits unread: its lapse is
// funduq's, and counts nothing (design.md §Counters).
func TestOfferBehindWaitingQueriesIsNotUnanswered(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	_, old, _ := h.CompletedRun(p, "echo", "an old thread to ask about")
	r, thread := h.Door(p.Key, "echo", "", "first")
	s, _ := h.Door(p.Key, "echo", thread, "second") // offered once r is claimed (D2)
	if f := p.Offer(); f.RunID != r {
		t.Fatalf("offer %s, want %s", f.RunID, r)
	}
	// s read into its lane before the queries below: their waits are
	// the only ones this test is about (they hold at most half the
	// broker's pool, so its read would not wait behind them anyway).
	h.Taken(s)

	release := h.Hold(`LOCK TABLE thread_messages IN ACCESS EXCLUSIVE MODE`)
	query := func(i int) {
		p.SendRaw(fmt.Sprintf(`{"type":"query","queryId":"q%d","method":"thread_messages","params":{"threadId":%q}}`, i, old))
	}
	for i := range 8 {
		query(i)
	}
	p.Accept(r)
	if f := p.Offer(); f.RunID != s {
		t.Fatalf("offer %s, want %s", f.RunID, s)
	}
	query(8)    // waits for a slot: the link is not read after it
	p.Accept(s) // in time
	h.Eventually("the link's read loop waits for a query slot", func() bool {
		return strings.Contains(metrics(t, h), "funduq_broker_link_query_waits_total 1")
	})
	h.Clock.Advance(5 * time.Second) // deliver_timeout
	release()
	h.WaitStatus(s, run.Running) // the accept claims it, in time or late
	for range 9 {
		p.Expect(wire.TypeQueryResult, nil)
	}
	h.Settle()
	nothingCounted(t, h, p.Key, "funduq's wait on its own queries, blamed on the provider")
}
