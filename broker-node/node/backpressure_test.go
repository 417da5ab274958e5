package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// While PostgreSQL takes no broker writes (every fenced write waits on a
// lock, and the broker's connections are cut as well), a provider streaming
// events fills its link's backlog and no further: the broker stops reading
// the link, so the provider's writes stall instead of the broker's memory
// growing. When writes go through again, every event is stored once, in
// order — resends included.
func TestEventBacklogStopsReadingTheLink(t *testing.T) {
	const backlog, n, size = 8, 150, 64 << 10
	h := nodetest.Start(t, func(c *configBroker) { c.LinkEventBacklog = backlog })
	p := h.Connect(0xe2, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("first event stored", func() bool { return len(h.Events(id)) == 1 })

	// Block every fenced write: the fence reads broker_leader FOR SHARE.
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT epoch FROM broker_leader WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := lock.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	t.Logf("terminated %d backends of the broker's database; fenced writes wait on a lock", killed)

	pad := strings.Repeat("x", size)
	frame := func(i int) wire.Event {
		s := int64(i + 1)
		return wire.Event{Type: wire.TypeEvent, RunID: id, Seq: &s,
			Event: json.RawMessage(fmt.Sprintf(`{"type":"CUSTOM","name":"tick","value":%d,"pad":%q}`, i, pad))}
	}
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			p.Send(frame(i))
			sent.Add(1)
		}
	}()

	h.Eventually("the link's backlog fills", func() bool { _, most := h.Node.Broker.EventsWaiting(); return most == backlog })
	for range 20 {
		if _, most := h.Node.Broker.EventsWaiting(); most > backlog {
			t.Fatalf("%d events waiting on one link, over the backlog of %d", most, backlog)
		}
		if got := len(h.Events(id)); got != 1 {
			t.Fatalf("%d events stored while writes were blocked", got)
		}
	}
	// 150 × 64 KiB is far more than the sockets buffer: the provider is
	// stuck in its writes because the broker stopped reading.
	if s := sent.Load(); s >= n {
		t.Fatalf("the provider wrote all %d events while the broker could store none", s)
	}
	t.Logf("provider stalled after %d of %d frames", sent.Load(), n)

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	for i := n - 5; i < n; i++ { // resends of events already stored
		p.Send(frame(i))
	}
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.Finish(id)
	// Nearly 10 MB to store after the outage, under the race detector on a
	// shared machine: a longer hang guard than the harness's.
	for deadline := time.Now().Add(90 * time.Second); h.Run(id).Status != run.Completed; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("run still %s after the outage", h.Run(id).Status)
		}
	}
	evs := h.Events(id)
	if len(evs) != n+2 {
		t.Fatalf("%d events stored, want %d", len(evs), n+2)
	}
	for i, ev := range evs[1 : n+1] {
		if ev["value"] != float64(i) {
			t.Fatalf("event %d holds value %v: order or duplicates", i+2, ev["value"])
		}
	}
	if total, _ := h.Node.Broker.EventsWaiting(); total != 0 {
		t.Fatalf("%d events still counted as waiting", total)
	}
}
