package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/provider"
)

// blockFencedWrites makes every fenced write of h's broker wait on a lock
// (the fence reads broker_leader FOR SHARE) and cuts the broker's
// connections, until release is called.
func blockFencedWrites(t *testing.T, h *nodetest.Harness) (release func()) {
	t.Helper()
	ctx := context.Background()
	lock, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close(ctx) })
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
	return func() {
		t.Helper()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

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

	release := blockFencedWrites(t, h)

	pad := strings.Repeat("x", size)
	frame := func(i int) wire.Event {
		s := int64(i + 1)
		return wire.Event{Type: wire.TypeEvent, RunID: id, ProviderSeq: &s,
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

	release()
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

// Our provider SDK keeps its link through an outage of the broker's
// database longer than its pings could go unanswered and longer than the
// 10 s its writes used to be allowed: the broker stops reading the link
// while its backlog is full, so the SDK's writes stall and its pings go
// unanswered, but the broker's own pings go on and show it is alive. The
// SDK neither drops the link nor reconnects, and once writes go through
// the run completes with every event stored once, in order.
func TestSDKLinkSurvivesBackpressure(t *testing.T) {
	const backlog, n, size = 8, 150, 64 << 10
	// Stalled for longer than both the SDK's old 10 s write timeout and,
	// many times over, its 2.5 s pong wait (PingInterval 1 s); under the
	// 2 min default StallTimeout.
	const outage = 12 * time.Second
	h := nodetest.StartWith(t, func(c *configBroker) { c.LinkEventBacklog = backlog },
		func(o *node.Options) { o.LinkPingInterval = 200 * time.Millisecond })

	signer, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0xe3))
	logs := &registrations{}
	var starts atomic.Int32
	started := make(chan string, 1)
	stream := make(chan struct{})
	pad := strings.Repeat("x", size)
	client, err := provider.New(provider.Config{
		BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Backoff:      provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		PingInterval: time.Second,
		Logger:       slog.New(logs),
		Agents: []provider.Agent{{Name: "stream", Handler: func(ctx context.Context, r *provider.Run) error {
			starts.Add(1)
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			started <- r.ID
			<-stream
			for i := range n {
				if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "tick", "value": i, "pad": pad}); err != nil {
					return err
				}
			}
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runSDK(client)()

	id, _ := h.Door(signer.PublicKeyHex(), "stream", "", "a lot, please")
	<-started
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })

	release := blockFencedWrites(t, h)
	close(stream)
	h.Eventually("the link's backlog fills", func() bool { _, most := h.Node.Broker.EventsWaiting(); return most == backlog })
	// ~9.6 MB is far more than the sockets buffer: the SDK's writer is
	// stuck in a write the broker does not read.
	for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !client.Connected() {
			t.Fatalf("the SDK dropped its link during the outage; it logged:\n%s", logs.warnings())
		}
		if r := logs.count.Load(); r != 1 {
			t.Fatalf("the SDK registered %d times during the outage", r)
		}
		if _, most := h.Node.Broker.EventsWaiting(); most > backlog {
			t.Fatalf("%d events waiting on one link, over the backlog of %d", most, backlog)
		}
		if st := h.Run(id).Status; st != run.Running {
			t.Fatalf("run %s during the outage", st)
		}
	}
	if got := len(h.Events(id)); got != 1 {
		t.Fatalf("%d events stored while writes were blocked", got)
	}
	release()

	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := h.Run(id)
		if r.Status == run.Completed {
			break
		}
		if r.Status.Terminal() || time.Now().After(deadline) {
			t.Fatalf("run %s after the outage (%s)", r.Status, r.FailureReason)
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
	if r := logs.count.Load(); r != 1 {
		t.Fatalf("the SDK registered %d times, want once: it dropped the link; it logged:\n%s", r, logs.warnings())
	}
	if s := starts.Load(); s != 1 {
		t.Fatalf("the handler started %d times for one run", s)
	}
	if q := h.Quality(signer.PublicKeyHex()); q.Abandoned != 0 {
		t.Fatalf("quality %+v", q)
	}
}

// registrations is a log handler counting the SDK's "provider registered"
// records: one per link.
// registrations counts the SDK's registrations and keeps its warnings, so
// a test that sees the link dropped can say why.
type registrations struct {
	count atomic.Int32
	mu    sync.Mutex
	warns []string
}

func (*registrations) Enabled(context.Context, slog.Level) bool { return true }
func (r *registrations) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message == "provider registered" {
		r.count.Add(1)
	}
	if rec.Level >= slog.LevelWarn {
		line := rec.Message
		rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		r.mu.Lock()
		r.warns = append(r.warns, line)
		r.mu.Unlock()
	}
	return nil
}

// warnings is what the SDK logged at Warn or above, one line each.
func (r *registrations) warnings() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.warns, "\n")
}

func (r *registrations) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *registrations) WithGroup(string) slog.Handler      { return r }
