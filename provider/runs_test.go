package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// singleAgent builds a client of f with one agent "a" running h.
func singleAgent(t *testing.T, f *fakeFunduq, h Handler) (*Client, *peer, func()) {
	t.Helper()
	c, stop := startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: h}))
	p := f.registeredPeer(t)
	waitReady(t, c)
	return c, p, stop
}

func TestEventsThenFinishInOrderWithSeq(t *testing.T) {
	f := newFakeFunduq(t)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		if err := run.EmitText(ctx, run.ID+"-msg", "echo: "+run.LastUserText()); err != nil {
			return err
		}
		return run.Emit(ctx, json.RawMessage(`{"type": "RUN_FINISHED", "threadId": "`+run.ThreadID+`", "runId": "`+run.ID+`"}`))
	})
	p.send(t, runFrame("r-1", "a", "t-1", "<hi & bye>"))
	p.expectAck(t, "r-1")
	want := []map[string]any{
		{"type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1"},
		{"type": "TEXT_MESSAGE_START", "messageId": "r-1-msg", "role": "assistant"},
		{"type": "TEXT_MESSAGE_CONTENT", "messageId": "r-1-msg", "delta": "echo: <hi & bye>"},
		{"type": "TEXT_MESSAGE_END", "messageId": "r-1-msg"},
		{"type": "RUN_FINISHED", "threadId": "t-1", "runId": "r-1"},
	}
	for i, w := range want {
		got := p.expectEvent(t, "r-1", int64(i+1))
		if !sameJSON(got, w) {
			t.Fatalf("event %d = %v, want %v", i+1, got, w)
		}
	}
	p.expectFinish(t, "r-1")
}

func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestEventFrameBytes(t *testing.T) {
	f := newFakeFunduq(t)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		return run.Emit(ctx, []byte(`{ "type" : "CUSTOM", "name": "x<y", "value": 1 }`))
	})
	p.send(t, runFrame("r-\"q\"", "a", "t-1", "hi"))
	p.expectAck(t, `r-"q"`)
	_, raw := p.next(t)
	const want = `{"type":"event","runId":"r-\"q\"","seq":1,"event":{"type":"CUSTOM","name":"x<y","value":1}}`
	if string(raw) != want {
		t.Fatalf("event frame\n got %s\nwant %s", raw, want)
	}
	_, raw = p.next(t)
	if string(raw) != `{"type":"finish","runId":"r-\"q\""}` {
		t.Fatalf("finish frame %s", raw)
	}
}

func TestHandlerErrorBecomesRunError(t *testing.T) {
	f := newFakeFunduq(t)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		switch run.ID {
		case "plain":
			_ = run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID})
			return errors.New("model unavailable")
		case "own-error":
			_ = run.Emit(ctx, map[string]any{"type": "RUN_ERROR", "message": "my words"})
			return errors.New("not relayed")
		case "finished":
			_ = run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
			return errors.New("cleanup failed")
		case "panics":
			panic("kaboom")
		}
		return nil
	})

	p.send(t, runFrame("plain", "a", "t-1", "hi"))
	p.expectAck(t, "plain")
	p.expectEvent(t, "plain", 1)
	if ev := p.expectEvent(t, "plain", 2); !sameJSON(ev, map[string]any{"type": "RUN_ERROR", "message": "model unavailable"}) {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "plain")

	p.send(t, runFrame("own-error", "a", "t-2", "hi"))
	p.expectAck(t, "own-error")
	if ev := p.expectEvent(t, "own-error", 1); ev["message"] != "my words" {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "own-error")

	p.send(t, runFrame("finished", "a", "t-3", "hi"))
	p.expectAck(t, "finished")
	p.expectEvent(t, "finished", 1)
	p.expectFinish(t, "finished")

	p.send(t, runFrame("panics", "a", "t-4", "hi"))
	p.expectAck(t, "panics")
	if ev := p.expectEvent(t, "panics", 1); ev["type"] != "RUN_ERROR" || !hasPrefix(ev["message"], "handler panicked: kaboom") {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "panics")
}

func TestEmitChecksItsInput(t *testing.T) {
	f := newFakeFunduq(t)
	done := make(chan *Run, 1)
	errs := make(chan error, 4)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		errs <- run.Emit(ctx, map[string]any{"delta": "no type"})
		errs <- run.Emit(ctx, "a string")
		errs <- run.Emit(ctx, json.RawMessage(`{"type":`))
		errs <- run.Emit(ctx, map[string]any{"type": 7})
		done <- run
		return nil
	})
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	p.expectFinish(t, "r-1") // nothing invalid reached the wire
	for range 4 {
		if err := <-errs; err == nil {
			t.Fatal("Emit accepted an invalid event")
		}
	}
	run := <-done
	if err := run.Emit(t.Context(), map[string]any{"type": "CUSTOM", "name": "n", "value": 1}); !errors.Is(err, ErrRunFinished) {
		t.Fatalf("Emit after finish: %v", err)
	}
	detached := &Run{ID: "x"}
	if err := detached.Emit(t.Context(), map[string]any{"type": "CUSTOM"}); !errors.Is(err, ErrDetachedRun) {
		t.Fatalf("Emit on a detached run: %v", err)
	}
}

func TestCancelReachesTheHandlerAndFinishFollows(t *testing.T) {
	f := newFakeFunduq(t)
	started := make(chan struct{}, 2)
	causes := make(chan error, 2)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		if run.ID == "complies" {
			return run.Emit(context.Background(), map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
		}
		return ctx.Err()
	})

	p.send(t, runFrame("complies", "a", "t-1", "hi"))
	p.expectAck(t, "complies")
	<-started
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "complies"})
	if cause := <-causes; !errors.Is(cause, ErrCancelRequested) {
		t.Fatalf("cause %v", cause)
	}
	if ev := p.expectEvent(t, "complies", 1); ev["type"] != "RUN_FINISHED" {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "complies")

	p.send(t, runFrame("errs", "a", "t-2", "hi"))
	p.expectAck(t, "errs")
	<-started
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "errs"})
	<-causes
	if ev := p.expectEvent(t, "errs", 1); ev["type"] != "RUN_ERROR" || ev["message"] != context.Canceled.Error() {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "errs")

	// A cancel for a run the client does not hold is a no-op.
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "errs"})
	p.send(t, runFrame("after", "a", "t-3", "hi"))
	p.expectAck(t, "after")
	<-started
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "after"})
	<-causes
	p.expectEvent(t, "after", 1)
	p.expectFinish(t, "after")
}

func TestNoSuchRunCancelsTheHandler(t *testing.T) {
	f := newFakeFunduq(t)
	causes := make(chan error, 1)
	g := newGates()
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		g.started <- run
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	})
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	p.expectEvent(t, "r-1", 1)
	g.waitStarted(t)
	// An error without "no such run" meaning is only logged.
	p.send(t, wire.Error{Type: wire.TypeError, RunID: "r-1", Message: "something else"})
	p.send(t, wire.Error{Type: wire.TypeError, RunID: "r-1", Message: "event refused"})
	if cause := <-causes; !errors.Is(cause, ErrRunNotHeld) {
		t.Fatalf("cause %v", cause)
	}
	p.expectFinish(t, "r-1")
}

func TestOddFramesAreLoggedNotFatal(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	_, p, _ := singleAgent(t, f, g.handler)
	p.sendRaw(t, `not json`)
	p.sendRaw(t, `[1,2]`)
	p.sendRaw(t, `{"type":"surprise"}`)
	p.sendRaw(t, `{"type":"cancel"}`)
	p.sendRaw(t, `{"type":"error","message":"unexpected frame 'x'"}`)
	p.sendRaw(t, `{"type":"registered","names":["a"]}`)
	p.sendRaw(t, `{"type":"queryResult","queryId":"nobody","result":[]}`)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	g.waitStarted(t)
	g.release("r-1")
	p.expectFinish(t, "r-1")
}

func TestShutdownCancelsHandlersAndFlushesTheirEnd(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	_, p, stop := singleAgent(t, f, g.handler)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	g.waitStarted(t)
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	// The handler sees Run's context end, returns its error, and the run's
	// end is still written before the link closes.
	if ev := p.expectEvent(t, "r-1", 1); ev["type"] != "RUN_ERROR" {
		t.Fatalf("got %v", ev)
	}
	p.expectFinish(t, "r-1")
	if rest := p.closed(t); len(rest) != 0 {
		t.Fatalf("frames after finish: %s", rest[0])
	}
	select {
	case <-stopped:
	case <-time.After(guard):
		t.Fatal("Run did not return")
	}
}

func TestRunInputHelpers(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
		n                 int
	}{
		{"string content", `{"messages":[{"id":"1","role":"user","content":"first"},{"id":"2","role":"assistant","content":"reply"},{"id":"3","role":"user","content":"second"},{"id":"4","role":"assistant","content":"x"}]}`, "second", 4},
		{"parts", `{"messages":[{"id":"1","role":"user","content":[{"type":"text","text":"a"},{"type":"binary","mimeType":"image/png","data":"AA=="},{"type":"text","text":"b"}]}]}`, "a\nb", 1},
		{"no user", `{"messages":[{"id":"1","role":"system","content":"be nice"}]}`, "", 1},
		{"no messages", `{"threadId":"t"}`, "", 0},
		{"not json", `nope`, "", 0},
	} {
		r := &Run{Input: json.RawMessage(tc.input)}
		if got := r.LastUserText(); got != tc.want {
			t.Errorf("%s: LastUserText = %q, want %q", tc.name, got, tc.want)
		}
		if got := len(r.Messages()); got != tc.n {
			t.Errorf("%s: %d messages, want %d", tc.name, got, tc.n)
		}
	}
}

// Once funduq refused one of a run's reports (it no longer holds the run),
// Emit says so: a handler that streams with "if err := run.Emit(…); err !=
// nil { return err }", as the README's agent does, stops there instead of
// producing the rest of an answer nobody will record.
func TestEmitAfterARefusedReportReturnsErrRunNotHeld(t *testing.T) {
	f := newFakeFunduq(t)
	emitted := make(chan error, 1)
	g := newGates()
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		g.started <- run
		<-ctx.Done()
		err := run.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
		emitted <- err
		return err
	})
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	p.expectEvent(t, "r-1", 1)
	g.waitStarted(t)
	p.send(t, wire.Error{Type: wire.TypeError, RunID: "r-1", Message: "event refused: the run has ended"})
	if err := <-emitted; !errors.Is(err, ErrRunNotHeld) {
		t.Fatalf("Emit after the refusal returned %v, want ErrRunNotHeld", err)
	}
}

// An event funduq would refuse as malformed AG-UI (here a
// TEXT_MESSAGE_CONTENT without its delta) fails the whole run once sent,
// and the author hears of it only from a log line later. Emit checks it
// as funduq does and returns the error at the call, naming the field;
// nothing is sent, so the run goes on.
func TestEmitRefusesAnInvalidAGUIEvent(t *testing.T) {
	f := newFakeFunduq(t)
	refused := make(chan error, 1)
	_, p, _ := singleAgent(t, f, func(ctx context.Context, run *Run) error {
		refused <- run.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m"})
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
	})
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	if ev := p.expectEvent(t, "r-1", 1); ev["type"] != "RUN_STARTED" {
		t.Fatalf("first event sent: %v, want RUN_STARTED (the invalid one kept back)", ev)
	}
	if err := <-refused; !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "delta") {
		t.Fatalf("Emit of the invalid event returned %v, want an error naming delta", err)
	}
	p.expectEvent(t, "r-1", 2)
	p.expectFinish(t, "r-1")
}
