package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// PostgreSQL dropping every connection of the broker mid-run loses
// nothing: writes are retried on fresh connections, the run completes with
// every event stored once, in order.
func TestDatabaseConnectionsLostMidRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("first event stored", func() bool { return len(h.Events(id)) == 1 })
	var killed int
	err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&killed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("terminated %d backends of the broker's database", killed)
	for i := range 3 {
		p.Event(id, fmt.Sprintf(`{"type":"CUSTOM","name":"tick","value":%d}`, i))
	}
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	evs := h.Events(id)
	if len(evs) != 5 {
		t.Fatalf("%d events, want 5: %v", len(evs), evs)
	}
	for i, ev := range evs[1:4] {
		if ev["value"] != float64(i) {
			t.Fatalf("event order: %v", evs)
		}
	}
}
