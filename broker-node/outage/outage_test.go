package outage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// PostgreSQL restarted under load. While it is down the door answers every
// kind of request 503 with Retry-After by itself, and the broker keeps the
// provider's link and the run's lane, holding the events the provider
// reports meanwhile (hundreds); when it is back the door serves again without help,
// every reported event is stored in order, the acknowledged run completes
// and its caller's stream — open through the outage — gets every event once
// and its end. A run acknowledged just before the outage is offered and
// completes afterwards, and a new run completes on the same link.
//
// The downtime is condition-driven: PostgreSQL comes back once the door has
// answered several requests.
func TestPostgresRestartUnderLoad(t *testing.T) {
	e := setup(t, true, nil)
	p := e.h.Connect(0x31, nil)
	p.Register("echo")

	sa, a := e.post(p.Key, "echo", "before the outage")
	f := p.Offer()
	if f.RunID != a {
		t.Fatalf("offer %s, want %s", f.RunID, a)
	}
	p.Accept(a)
	thread := *f.ThreadID
	p.Event(a, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, a))
	p.Event(a, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	sa.waitEvents(t, 2)
	// Run D is acknowledged just before the outage: the broker may or may
	// not have read it yet, and its offer may reach the provider while its
	// offering write waits for the database (they go out side by side).
	sd, d := e.post(p.Key, "echo", "just before the outage")

	if err := e.pg.Stop(); err != nil {
		t.Fatal(err)
	}
	// The provider carries on reporting while the database is away — more
	// than a broker can hold at once, if it bounds what it holds: its
	// writes may then wait (the broker stops reading the link), so they go
	// from a goroutine of their own.
	const deltas = 400
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		for i := range deltas {
			p.Event(a, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"part %d "}`, i))
		}
		p.Event(a, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
		p.Event(a, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, a))
		p.Finish(a)
	}()
	t.Cleanup(func() { <-reported })

	newRun := `{"threadId":"x","runId":"during","messages":[{"id":"u1","role":"user","content":"hi"}]}`
	// The downtime ends once the door has answered a few rounds and the
	// provider has reported everything — or, should the broker stop reading
	// the link while it holds all it can, after a bounded number of rounds.
	answered := 0
	for round := 0; round < 2 || round < 50 && !isClosed(reported); round++ {
		e.unavailable("POST /agui (a new run)", e.ask(http.MethodPost, "/agui/"+p.Key+"/echo", newRun))
		e.unavailable("GET /runs/{id}/events", e.ask(http.MethodGet, "/runs/"+a+"/events", ""))
		e.unavailable("GET /threads/{id}", e.ask(http.MethodGet, "/threads/"+thread, ""))
		e.unavailable("GET /agents", e.ask(http.MethodGet, "/agents", ""))
		answered += 4
	}
	// The broker kept what it owns: the link is open and the run's lane is
	// still there, holding the events it could not store yet.
	if closed, err := p.Closed(); closed {
		t.Fatalf("the provider's link closed during the database outage: %v", err)
	}
	snap := e.h.Node.Broker.Snapshot()
	if _, ok := snap.Lanes[a]; !ok || snap.Links != 1 {
		t.Fatalf("during the outage: lanes %v, links %d; want run %s's lane and the link", snap.Lanes, snap.Links, a)
	}
	t.Logf("PostgreSQL down: the door answered %d requests 503 with Retry-After; the provider reported all %d events meanwhile: %v",
		answered, deltas+2, isClosed(reported))

	if err := e.pg.Start(); err != nil {
		t.Fatal(err)
	}

	// Everything the provider reported lands, in order, once.
	select {
	case <-reported:
	case <-time.After(guard):
		t.Fatal("the provider could not write its events after the database came back")
	}
	evs := sa.waitClosed(t)
	checkStream(t, "the stream open through the outage", evs, 0)
	r := e.h.WaitStatus(a, run.Completed)
	stored := e.h.Events(a)
	if len(stored) != 2+deltas+2 || r.LastSeq != len(stored) {
		t.Fatalf("%d events stored (last_seq %d), want %d", len(stored), r.LastSeq, 2+deltas+2)
	}
	for i := range deltas {
		if got := stored[2+i]["delta"]; got != fmt.Sprintf("part %d ", i) {
			t.Fatalf("stored event %d has delta %v: out of order or lost", 3+i, got)
		}
	}
	if last := evs[len(evs)-1]; last.ID != len(stored) || last.Type != "RUN_FINISHED" {
		t.Fatalf("the caller's last event is %d:%s, want %d:RUN_FINISHED", last.ID, last.Type, len(stored))
	}

	// Run D is offered (and answered) once the database is back, and
	// completes.
	fd := p.Offer()
	if fd.RunID != d {
		t.Fatalf("offer %s, want the run acknowledged just before the outage (%s)", fd.RunID, d)
	}
	p.Accept(d)
	p.Complete(d, *fd.ThreadID)
	checkStream(t, "run D, acknowledged just before the outage", sd.waitClosed(t), 0)
	e.h.WaitStatus(d, run.Completed)

	// The door serves again by itself.
	eventually(t, "the door answers GET /agents 200 again", func() bool {
		return e.ask(http.MethodGet, "/agents", "").status == http.StatusOK
	})
	// And a new run completes on the link that lived through it.
	sb, b := e.post(p.Key, "echo", "after the outage")
	fb := p.Offer()
	if fb.RunID != b {
		t.Fatalf("offer %s, want %s", fb.RunID, b)
	}
	p.Accept(b)
	p.Complete(b, *fb.ThreadID)
	checkStream(t, "a run after the outage", sb.waitClosed(t), 0)
	e.h.WaitStatus(b, run.Completed)
	if closed, err := p.Closed(); closed {
		t.Fatalf("the link closed: %v", err)
	}
}

// PostgreSQL hung (every process of the server stopped: connections are
// accepted and never answered). The door must not hang with it: each kind
// of request is answered 503 with Retry-After by the door's own storage
// bounds — the request is still live when the handler returns, so nothing
// but the door's deadline could have ended the wait — and it serves again
// once the server answers.
func TestPostgresUnresponsive(t *testing.T) {
	e := setup(t, false, nil)
	// Warm the pool so the door holds several connections that will go
	// silent.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.ask(http.MethodGet, "/agents", "") })
	}
	wg.Wait()
	if err := e.pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	body := `{"threadId":"x","runId":"hung","messages":[{"id":"u1","role":"user","content":"hi"}]}`
	took(t, "POST /agui", e.unavailable("POST /agui", e.ask(http.MethodPost, "/agui/"+nodetest.SeedHex(0x33)+"/echo", body)))
	took(t, "GET /agents", e.unavailable("GET /agents", e.ask(http.MethodGet, "/agents", "")))
	took(t, "GET /runs/{id}/events", e.unavailable("GET /runs/{id}/events", e.ask(http.MethodGet, "/runs/run_x/events", "")))
	took(t, "GET /threads/{id}", e.unavailable("GET /threads/{id}", e.ask(http.MethodGet, "/threads/thread_x", "")))
	e.pg.Thaw()
	eventually(t, "the door answers GET /agents 200 again", func() bool {
		return e.ask(http.MethodGet, "/agents", "").status == http.StatusOK
	})
}

// Redis unavailable. The leader cannot renew its lease, so it self-fences
// before the lease could expire (D10): it stops leading, closes its
// provider links with a reason and becomes a standby (/readyz 503).
// Tickets answer 503 with Retry-After. The doors, without the live feed,
// serve streams from PostgreSQL: a finished run's stream opened during the
// outage delivers every stored event and its end, and a run asked for
// during the outage is accepted. When Redis returns, a leader is elected
// again, the provider reconnects, the run asked for during the outage
// completes — its stream, open since before Redis came back, gets every
// event once and its end — and the run that was in flight when the leader
// fenced gets its verdict on its open stream instead of hanging.
func TestRedisOutage(t *testing.T) {
	// A short lease makes the fence come quickly (it is TTL-bound).
	e := setup(t, true, func(c *config.Broker) { c.LeaseTTL = 2 * time.Second })
	p := e.h.Connect(0x32, nil)
	p.Register("echo")

	// Run B finishes before the outage.
	sb, b := e.post(p.Key, "echo", "finished before")
	fb := p.Offer()
	p.Accept(b)
	p.Complete(b, *fb.ThreadID)
	before := sb.waitClosed(t)
	checkStream(t, "run B before the outage", before, 0)
	e.h.WaitStatus(b, run.Completed)

	// Run A is in flight, streamed live, when Redis goes.
	sa, a := e.post(p.Key, "echo", "in flight")
	fa := p.Offer()
	p.Accept(a)
	p.Event(a, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *fa.ThreadID, a))
	sa.waitEvents(t, 1)

	if err := e.rs.Stop(); err != nil {
		t.Fatal(err)
	}

	// The leader fences itself and closes the link with a reason.
	e.h.Eventually("the leader steps down", func() bool { leading, _ := e.h.Node.Broker.Leading(); return !leading })
	var closeErr error
	e.h.Eventually("the provider's link is closed", func() bool {
		closed, err := p.Closed()
		closeErr = err
		return closed
	})
	var ce *websocket.CloseError
	if !errors.As(closeErr, &ce) || ce.Text == "" {
		t.Fatalf("the link was not closed with a close frame and a reason: %v", closeErr)
	}
	t.Logf("link closed: %d %q", ce.Code, ce.Text)
	if e.h.Ready() {
		t.Fatal("/readyz is 200 on a node that cannot reach Redis")
	}

	// Tickets: 503 with Retry-After.
	resp, err := hang.Post(e.h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+p.Key+`"}`))
	if err != nil {
		t.Fatalf("POST /tickets: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST /tickets during the Redis outage: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// The doors stream from PostgreSQL.
	replay := e.open(http.MethodGet, "/runs/"+b+"/events", "", 0).waitClosed(t)
	checkStream(t, "run B replayed during the outage", replay, 0)
	if got, want := describe(replay), describe(before); got != want {
		t.Fatalf("run B replayed during the outage: %s, want %s", got, want)
	}
	sc, c := e.post(p.Key, "echo", "asked during the outage")

	if err := e.rs.Start(); err != nil {
		t.Fatal(err)
	}
	e.h.Eventually("a leader is elected again", e.h.Ready)
	p2 := e.h.Connect(0x32, nil)
	p2.Register("echo")
	var fc wire.RunFrame
	for fc.RunID != c {
		fc = p2.Offer() // run A is not offered again: it was claimed
	}
	p2.Accept(c)
	p2.Complete(c, *fc.ThreadID)
	checkStream(t, "run C, streamed across the Redis outage", sc.waitClosed(t), 0)
	e.h.WaitStatus(c, run.Completed)

	// Run A's stream ends with the run's verdict.
	evs := sa.waitClosed(t)
	checkStream(t, "run A, in flight when the leader fenced", evs, 0)
	ra := e.h.Run(a)
	if !ra.Status.Terminal() || ra.LastSeq != evs[len(evs)-1].ID {
		t.Fatalf("run A: %s/%s last_seq %d; its stream ended at %d", ra.Status, ra.FailureReason, ra.LastSeq, evs[len(evs)-1].ID)
	}
	t.Logf("run A ended %s (%s)", ra.Status, ra.FailureReason)
}

// Redis hung (the server process stopped: commands are accepted and never
// answered — a partition that drops packets). The broker node's leader
// still steps down before its lease could expire (its Redis calls are
// bounded by their contexts, and a renewal never outlives the fence),
// closes its link with a reason, and POST /tickets answers 503 with
// Retry-After by its own bound. Once Redis answers again the node leads
// again, and a provider reconnects and completes a run.
func TestRedisHangs(t *testing.T) {
	const ttl = 3 * time.Second
	e := setup(t, true, func(c *config.Broker) { c.LeaseTTL = ttl })
	p := e.h.Connect(0x34, nil)
	p.Register("echo")

	opt, err := redis.ParseURL(e.rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	watch := redis.NewClient(opt)
	t.Cleanup(func() { watch.Close() })
	// Freeze just after a renewal landed (the key's time to live jumps
	// back up), so the lease's expiry is known: now + that time to live.
	key := prefix + "broker:lease"
	ctx := context.Background()
	var expiry time.Time
	prev := watch.PTTL(ctx, key).Val()
	eventually(t, "a lease renewal lands", func() bool {
		left := watch.PTTL(ctx, key).Val()
		if left > prev+100*time.Millisecond {
			expiry = time.Now().Add(left)
			e.rs.Freeze()
			return true
		}
		prev = left
		return false
	})
	e.h.Eventually("the leader steps down", func() bool { leading, _ := e.h.Node.Broker.Leading(); return !leading })
	if ended := time.Now(); !ended.Before(expiry) {
		t.Fatalf("the leader led until %v after its lease could have expired", ended.Sub(expiry))
	} else {
		t.Logf("the leader stepped down %v before its lease could expire", expiry.Sub(ended).Round(time.Millisecond))
	}
	var closeErr error
	e.h.Eventually("the provider's link is closed", func() bool {
		closed, err := p.Closed()
		closeErr = err
		return closed
	})
	var ce *websocket.CloseError
	if !errors.As(closeErr, &ce) || ce.Text == "" {
		t.Fatalf("the link was not closed with a close frame and a reason: %v", closeErr)
	}
	began := time.Now()
	resp, err := hang.Post(e.h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+p.Key+`"}`))
	if err != nil {
		t.Fatalf("POST /tickets: no answer within the test's hang guard: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST /tickets with Redis hung: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	t.Logf("POST /tickets: 503 in %v", time.Since(began).Round(time.Millisecond))

	e.rs.Thaw()
	e.h.Eventually("the node leads again", e.h.Ready)
	p2 := e.h.Connect(0x34, nil)
	p2.Register("echo")
	s, id := e.post(p2.Key, "echo", "after the hang")
	f := p2.Offer()
	if f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	p2.Accept(id)
	p2.Complete(id, *f.ThreadID)
	checkStream(t, "a run after Redis answers again", s.waitClosed(t), 0)
	e.h.WaitStatus(id, run.Completed)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// took logs how long the door took to answer (reported, never asserted).
func took(t *testing.T, what string, a answer) {
	t.Helper()
	t.Logf("%s: 503 Retry-After %s in %v", what, a.retryAfter, a.took.Round(time.Millisecond))
}
