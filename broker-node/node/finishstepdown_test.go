package node_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A query is answered only once the finish the link sent before it is
// taken, as for its events: an answer is the barrier a provider takes for
// "funduq has my reports" (our SDK stops resending a finish behind two
// answered queries). Before, a finish waiting in its lane behind a slow
// write was not waited for: the leader answered the query, stepped down
// without reading the finish, and the provider, told funduq had it, did not
// resend it to the next leader. The run then waited the provider grace and
// failed orphaned_by_funduq_restart instead of ending as its provider said
// (here: cancelled, as asked). design.md §Open questions, "A finish still
// queued when leadership ends".
func TestQueryNotAnsweredBeforeAnEarlierFinishIsTaken(t *testing.T) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xf4, nil)
	p.Register("echo")
	id, thread := a.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	refusals(t, p, p.Barrier(), 0) // stored

	// Every broker write waits on the leader row: the lane's write for the
	// cancel below waits, and the finish behind it in the lane's queue.
	release := a.Hold(`SELECT 1 FROM broker_leader WHERE id = 1 FOR UPDATE`)
	if _, err := a.Store.RequestCancel(t.Context(), id, ""); err != nil {
		t.Fatal(err)
	}
	a.Eventually("the lane's write waits on the leader row", a.LockWaits)
	p.Finish(id) // the stream ended without a terminal event
	p.Send(wire.Query{Type: wire.TypeQuery, QueryID: "sync-1", Method: "funduq.sync", Params: json.RawMessage(`{}`)})
	// The read loop refuses an ack for a run nobody holds itself: its
	// answer says the query before it has been read.
	p.Accept("run_nobody")
	var frames [][]byte
	for {
		typ, f := p.Next()
		frames = append(frames, f)
		var e wire.Error
		if typ == wire.TypeError && json.Unmarshal(f, &e) == nil && e.RunID == "run_nobody" {
			break
		}
	}

	a.Shutdown() // the leader steps down, the finish untaken
	frames = append(frames, p.Rest()...)
	answered := false
	for _, f := range frames {
		var r wire.QueryResult
		if json.Unmarshal(f, &r) == nil && r.Type == wire.TypeQueryResult && r.QueryID == "sync-1" {
			answered = true
			t.Errorf("the query was answered although the finish before it was never taken: %s", f)
		}
	}
	release()
	b.Eventually("b leads", b.Ready)

	// The provider resends what funduq did not answer for.
	back := b.Connect(0xf4, nil)
	back.Register("echo")
	if !answered {
		back.Finish(id)
		back.Expect(wire.TypeCancel, nil) // the cancel, asked anew of the link re-adopting the run (D7)
	}
	back.None()
	if r := b.Run(id); r.Status != run.Cancelled {
		t.Fatalf("run %s (%s), want cancelled as its provider's finish says, not left for the grace", r.Status, r.FailureReason)
	}
}
