package a2a_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A caller that hangs up while its send waits in PostgreSQL is no fault
// of funduq's: the door's log says the caller went away, at INFO, and
// holds no ERROR and no internal error for it — the lines an operator
// alerts on. The task it did not wait for is not written.
func TestCallerGoneMidRequestIsNotAnInternalError(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	logs := &syncbuf.Buffer{}
	c := newClient(t, startDoor(t, h, func(o *a2a.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}), p.Key, "echo", "")
	got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
	opened := c.send(c.message("m0", "hi", nil), nil)
	recv(t, got, "the first task")
	ctxID, _ := opened["contextId"].(string)
	runs := count(t, h, "runs")

	// The next message on the context waits for its thread's row, held
	// here...
	release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, ctxID)
	defer release()
	// ... and its caller hangs up.
	body := c.body("message/send", map[string]any{"message": c.message("m1", "again", map[string]any{"contextId": ctxID})})
	path := h.HangUpWhileLocked(c.url, body)
	var line map[string]any
	h.Eventually("the door logs the request's end", func() bool {
		line = logs.Record("path", path)
		return line != nil
	})
	if line["level"] != "INFO" || line["msg"] != "caller went away" {
		t.Errorf("the request's log line %v, want INFO \"caller went away\"", line)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "internal error") || strings.Contains(l, "unavailable") {
			t.Errorf("logged as funduq's fault: %s", l)
		}
	}
	if n := count(t, h, "runs"); n != runs {
		t.Errorf("%d runs written for a send whose caller left before it was admitted", n-runs)
	}
}

// A stream whose round's terminal event is relayed waits for the round's
// end to be recorded before its final status; a caller that hangs up
// meanwhile is no fault of funduq's either: one INFO line says the caller
// went away, with no WARN or ERROR. The record's read waits here behind a
// lock held on the runs table (the tail reads PostgreSQL only as it
// starts, so the door's only read waiting is that one), and the caller
// hangs up.
func TestCallerGoneWhileTheStreamAwaitsTheEndIsNotAFailure(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	logs := &syncbuf.Buffer{}
	c := newClient(t, startDoor(t, h, func(o *a2a.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// The end is waited for as long as the test needs; the tail
		// rereads PostgreSQL only as it starts.
		o.Tail.SettleWait, o.Tail.DBCheck = time.Hour, time.Hour
	}), p.Key, "echo", "")
	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("m0", "hi", nil)}), nil)
	if it, ok := s.next(); !ok || it.Resp.Result["kind"] != "task" {
		t.Fatalf("first item %+v, want the task", it)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	if it, ok := s.next(); !ok || stateOf(it.Resp.Result) != "working" {
		t.Fatalf("second item %+v, want the task working", it)
	}
	// The round's terminal event, and no finish: its end is not recorded.
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	h.Eventually("the terminal event is stored", func() bool { return len(h.Events(f.RunID)) == 2 })
	release := h.Hold(`LOCK TABLE runs IN ACCESS EXCLUSIVE MODE`)
	defer release()
	h.Eventually("the stream's read of the run waits", func() bool {
		var n int
		_ = h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'funduq-door' AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0
	})
	// The caller hangs up.
	s.cancel()
	var line map[string]any
	h.Eventually("the door logs the stream's end", func() bool {
		for _, m := range logs.Records() {
			if m["level"] != "INFO" || m["msg"] == "caller went away" {
				line = m
				return true
			}
		}
		return false
	})
	if line["level"] != "INFO" || line["msg"] != "caller went away" || line["run_id"] != f.RunID || line["thread_id"] != *f.ThreadID {
		t.Errorf("the stream's log line %v, want INFO \"caller went away\" naming the run and its thread (design.md §Logs)", line)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) {
			t.Errorf("logged as funduq's fault: %s", l)
		}
	}
	release()
	p.Finish(f.RunID)
	h.WaitStatus(f.RunID, run.Completed)
}
