package node_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A query is answered only once every event the link sent before it is
// stored, not merely read. Our SDK takes two answered sync queries after
// a finish for funduq having stored it and stops resending it: a leader
// that read a run's last events and finish, answered the queries behind
// them while the write of those events waited (on PostgreSQL, or its lane
// on a paused Redis) and then stepped down, lost them — the provider, told
// they were stored, did not resend them on its next link, and the run
// failed orphaned_by_funduq_restart after the grace. Here the write waits
// on a row lock while the leader steps down: the query behind it goes
// unanswered and the link closes.
func TestQueryNotAnsweredBeforeEarlierEventsAreStored(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	p := h.Connect(0xf3, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)

	// Hold the run's row: the lane's next event write waits for it.
	release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)

	p.Complete(id, thread) // RUN_STARTED … RUN_FINISHED, then finish
	p.Send(wire.Query{Type: wire.TypeQuery, QueryID: "sync-1", Method: "funduq.sync", Params: json.RawMessage(`{}`)})
	// The read loop refuses a report for a run nobody holds itself: its
	// answer says the query before it has been read.
	p.Event("run_nobody", `{"type":"RUN_STARTED","threadId":"t","runId":"run_nobody"}`)
	var frames [][]byte
	for {
		typ, f := p.Next()
		frames = append(frames, f)
		var e wire.Error
		if typ == wire.TypeError && json.Unmarshal(f, &e) == nil && e.RunID == "run_nobody" {
			break
		}
	}
	h.Eventually("the lane's write waits on the row lock", h.LockWaits)

	h.Shutdown() // the leader steps down, the events unstored
	frames = append(frames, p.Rest()...)
	for _, f := range frames {
		var r wire.QueryResult
		if json.Unmarshal(f, &r) == nil && r.Type == wire.TypeQueryResult && r.QueryID == "sync-1" {
			t.Fatalf("the query was answered although the events before it were never stored: %s", f)
		}
	}
	release()
	var stored int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM run_events WHERE run_id = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 0 {
		t.Fatalf("%d events stored, want none: the write waited on the lock until the leader stepped down", stored)
	}
}
