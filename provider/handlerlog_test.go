package provider

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// panickyLookup stands for the agent author's code that panics (a nil map,
// an index out of range); the log must lead back to it.
func panickyLookup(m map[string][]int) int { return m["missing"][3] }

// A handler that panics fails its run with a RUN_ERROR, and its author
// finds the panic in the log as an error, with the stack that leads to the
// line that panicked: "handler panicked: runtime error: index out of range"
// alone, at info level, does not say where.
func TestHandlerPanicIsLoggedAsAnErrorWithItsStack(t *testing.T) {
	f := newFakeFunduq(t)
	var logs syncbuf.Buffer
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: func(ctx context.Context, r *Run) error {
		return r.Emit(ctx, map[string]any{"type": "TEXT", "n": panickyLookup(nil)})
	}})
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	startClient(t, cfg)
	p := f.registeredPeer(t)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	if ev := p.expectEvent(t, "r-1", 1); ev["type"] != "RUN_ERROR" || !hasPrefix(ev["message"], "handler panicked: ") {
		t.Fatalf("event %v, want the panic's RUN_ERROR", ev)
	}
	p.expectFinish(t, "r-1") // logged before the finish was queued
	rec := runRecord(t, &logs, "r-1", "panic")
	if rec == nil {
		t.Fatalf("no log record names the run's panic: %s", logs.String())
	}
	stack, _ := rec["stack"].(string)
	if rec["level"] != "ERROR" || !strings.Contains(stack, "panickyLookup") {
		t.Fatalf("the panic was logged as %v, want level ERROR with a stack naming panickyLookup", rec)
	}
}

// A handler that returns nil without having emitted RUN_FINISHED or
// RUN_ERROR leaves funduq to fail the run
// (provider_stream_ended_without_finishing); its author hears of it in the
// log, naming the run, rather than only from a caller.
func TestHandlerReturningWithoutAnEndIsLogged(t *testing.T) {
	f := newFakeFunduq(t)
	var logs syncbuf.Buffer
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: func(ctx context.Context, r *Run) error {
		return r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID})
	}})
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	startClient(t, cfg)
	p := f.registeredPeer(t)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	p.expectEvent(t, "r-1", 1)
	p.expectFinish(t, "r-1") // logged before the finish was queued
	rec := runRecord(t, &logs, "r-1", "provider_stream_ended_without_finishing")
	if rec == nil || rec["level"] != "WARN" {
		t.Fatalf("the run's end without RUN_FINISHED was logged as %v, want a warning naming provider_stream_ended_without_finishing; log: %s", rec, logs.String())
	}
}

// runRecord is the first log record naming runID whose message contains
// sub, or nil. A record about a run names it, its thread and the provider
// with the words the broker's logs use (run_id, thread_id, provider_key), so
// one query finds a run on both sides; a record that names the run
// otherwise fails the test.
func runRecord(t *testing.T, logs *syncbuf.Buffer, runID, sub string) map[string]any {
	t.Helper()
	for _, rec := range logs.Records() {
		msg, _ := rec["msg"].(string)
		if !strings.Contains(msg, sub) {
			continue
		}
		if rec["runId"] != nil {
			t.Fatalf("record %v names its run as runId, want run_id as the broker logs it", rec)
		}
		if rec["run_id"] != runID {
			continue
		}
		if rec["thread_id"] == nil || rec["provider_key"] == nil {
			t.Fatalf("record %v does not name its thread_id and provider_key", rec)
		}
		return rec
	}
	return nil
}
