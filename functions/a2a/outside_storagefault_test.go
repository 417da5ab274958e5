package a2a_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// doorOutage makes the test's database unreachable for its doors (door.Connect
// names their connections funduq-door) while the broker keeps the
// connections it holds: new connections are refused and the doors' are
// terminated. end lets connections in again.
func doorOutage(t *testing.T, h *nodetest.Harness) (end func()) {
	t.Helper()
	ctx := context.Background()
	var db string
	if err := h.DB().QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	// A database's connections are switched off from another one.
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	allow := func(on bool) {
		t.Helper()
		sql := `ALTER DATABASE ` + pgx.Identifier{db}.Sanitize() + ` ALLOW_CONNECTIONS false`
		if on {
			sql = `ALTER DATABASE ` + pgx.Identifier{db}.Sanitize() + ` ALLOW_CONNECTIONS true`
		}
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	allow(false)
	ended := false
	end = func() {
		if !ended {
			ended = true
			allow(true)
		}
	}
	t.Cleanup(end)
	h.Eventually("the doors' backends are gone", func() bool {
		var left int
		err := h.DB().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'funduq-door' AND datname = current_database()`).Scan(&left)
		return err == nil && left == 0
	})
	return end
}

// A stream whose run's terminal event it relayed, but whose end it cannot
// read because the door's storage went away, ends with a JSON-RPC error
// the caller can act on (storage unavailable: resubscribe later) — not
// silently, which a client reads as the task's end. Once storage is back,
// tasks/get shows the task completed with its reply.
func TestOutsideStreamWhoseEndCannotBeReadSaysSo(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *a2a.Options) {
		o.Tail.SettleWait = 300 * time.Millisecond // the outage outlasts it
		o.Tail.DBCheck = time.Hour                  // the tail reads the live feed alone
	})
	c := newClient(t, srv, p.Key, "echo", "")
	st := c.stream(c.body("message/stream", map[string]any{"message": c.message("m", "hi", nil)}), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"one"}`)
	for {
		it, ok := st.next()
		if !ok {
			t.Fatal("the stream ended before the reply")
		}
		if it.Resp.Result["kind"] == "artifact-update" {
			break
		}
	}

	endOutage := doorOutage(t, h)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	rest := st.rest()
	if len(rest) == 0 {
		t.Fatal("the stream ended after the reply without a final status or an error")
	}
	tail := rest[len(rest)-1]
	final, _ := tail.Resp.Result["final"].(bool)
	if !final && (tail.Resp.Error == nil || tail.Resp.Error.Code != a2a.CodeUnavailable) {
		t.Fatalf("the stream ended with %+v (error %+v), want a final status or error %d", tail.Resp.Result, tail.Resp.Error, a2a.CodeUnavailable)
	}
	endOutage()
	p.Finish(f.RunID)
	h.WaitStatus(f.RunID, run.Completed)
	// The task ended meanwhile: tasks/get reads it (a resubscribe to an
	// ended task is told to).
	got := c.ok("tasks/get", map[string]any{"id": f.RunID})
	if stateOf(got) != "completed" || artifactsOf(got)["r"] != "one" {
		t.Fatalf("tasks/get after the outage: %q %v", stateOf(got), artifactsOf(got))
	}
}
