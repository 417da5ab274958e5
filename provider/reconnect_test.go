package provider

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/wire"
)

// holdTickets makes POST /tickets number from and later wait until the
// returned release is called (or the request is abandoned).
func holdTickets(f *fakeFunduq, from int) (release func()) {
	hold := make(chan struct{})
	f.setHooks(func(f *fakeFunduq) {
		f.onTicket = func(n int, w http.ResponseWriter, r *http.Request) bool {
			if n < from {
				return false
			}
			select {
			case <-hold:
				return false
			case <-r.Context().Done():
				return true
			}
		}
	})
	var released bool
	return func() {
		if !released {
			released = true
			close(hold)
		}
	}
}

// waitTicketN waits for the n-th POST /tickets.
func (f *fakeFunduq) waitTicketN(t *testing.T, n int) {
	t.Helper()
	for f.waitTicket(t) < n {
	}
}

func TestReconnectResendsBufferedFramesInOrder(t *testing.T) {
	f := newFakeFunduq(t)
	step1, step2 := make(chan struct{}), make(chan struct{})
	emitted := make(chan int, 2)
	ctxErrs := make(chan error, 1)
	h := func(ctx context.Context, run *Run) error {
		ev := func(typ string, extra ...string) map[string]any {
			m := map[string]any{"type": typ, "threadId": run.ThreadID, "runId": run.ID}
			for i := 0; i+1 < len(extra); i += 2 {
				m[extra[i]] = extra[i+1]
			}
			return m
		}
		if err := run.Emit(ctx, ev("RUN_STARTED")); err != nil {
			return err
		}
		<-step1 // the link is down now
		if err := run.EmitText(ctx, "m1", "while you were out"); err != nil {
			return err
		}
		emitted <- 1
		<-step2 // the link is back
		ctxErrs <- ctx.Err()
		return run.Emit(ctx, ev("RUN_FINISHED"))
	}
	c, _ := startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: h}))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	p1.expectEvent(t, "r-1", 1)

	release := holdTickets(f, 2)
	defer release()
	p1.drop()
	f.waitTicketN(t, 2) // the client noticed and is reconnecting
	if c.Connected() {
		t.Fatal("Connected() while reconnecting")
	}
	close(step1)
	<-emitted // three frames now wait in the outbox
	release()

	p2 := f.registeredPeer(t)
	if string(p2.regRaw) != string(p1.regRaw) {
		t.Fatalf("re-register %s, first register %s", p2.regRaw, p1.regRaw)
	}
	// It says again which run it holds (D7 re-adoption), then resends
	// what it wrote to the dead link (which may never have been stored)
	// and what could not be delivered, in order, with its seq.
	expectFrames(t, p2,
		"ack r-1 true",
		"event r-1 #1 RUN_STARTED",
		"event r-1 #2 TEXT_MESSAGE_START",
		"event r-1 #3 TEXT_MESSAGE_CONTENT",
		"event r-1 #4 TEXT_MESSAGE_END")
	if !c.Connected() {
		t.Fatal("Connected() false on the new link")
	}
	close(step2)
	if err := <-ctxErrs; err != nil {
		t.Fatalf("handler context ended by the link loss: %v", err)
	}
	expectFrames(t, p2, "event r-1 #5 RUN_FINISHED", "finish r-1")

	// The new link serves new runs as usual.
	p2.send(t, runFrame("r-2", "a", "t-2", "hi"))
	p2.expectAck(t, "r-2")
	p2.expectEvent(t, "r-2", 1)
}

func TestFinishWrittenWhileDownIsSentAfterReconnect(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, echoAgent(g))
	cfg.MaxConcurrentRuns = intp(1)
	startClient(t, cfg)
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "echo", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)

	release := holdTickets(f, 2)
	defer release()
	// A clean close from funduq's side is a link loss like any other.
	p1.send(t, wire.Error{Type: wire.TypeError, Message: "going away"})
	_ = p1.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseGoingAway, "bye"), time.Now().Add(time.Second))
	f.waitTicketN(t, 2)
	// While down the run still holds its place.
	g.release("r-1")
	release()

	p2 := f.registeredPeer(t)
	expectFrames(t, p2, "ack r-1 true", "finish r-1")
	// finish freed the place on the new link.
	p2.send(t, runFrame("r-2", "echo", "t-2", "hi"))
	wantVerdict(t, p2.expectAck(t, "r-2"), wire.Accepted, "")
	g.waitStarted(t)
	g.release("r-2")
	expectFrames(t, p2, "finish r-2")
}

func TestRunFullWhileDownDeclinesUntilFinishIsOut(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, echoAgent(g))
	cfg.MaxConcurrentRuns = intp(1)
	startClient(t, cfg)
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "echo", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	p1.drop()

	// The still-running handler counts against capacity on the next link.
	p2 := f.registeredPeer(t)
	wantVerdict(t, p2.expectAck(t, "r-1"), wire.Accepted, "") // still holds r-1
	p2.send(t, runFrame("r-2", "echo", "t-2", "hi"))
	wantVerdict(t, p2.expectAck(t, "r-2"), wire.Declined, "")
	g.release("r-1")
	expectFrames(t, p2, "finish r-1")
}

func TestBufferIsBoundedWhileDown(t *testing.T) {
	f := newFakeFunduq(t)
	down := make(chan struct{})
	full := make(chan error, 1)
	h := func(ctx context.Context, run *Run) error {
		ev := func(n int) map[string]any { return map[string]any{"type": "CUSTOM", "name": "n", "value": n} }
		if err := run.Emit(ctx, ev(1)); err != nil {
			return err
		}
		<-down
		for n := 2; n <= 4; n++ {
			if err := run.Emit(ctx, ev(n)); err != nil {
				return err
			}
		}
		// Three frames wait and the bound is three: with no room, Emit
		// waits for room only as long as its context allows.
		gone, cancel := context.WithCancel(ctx)
		cancel()
		full <- run.Emit(gone, ev(0))
		// This one waits until the new link has taken frames.
		return run.Emit(ctx, ev(5))
	}
	startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: h}), func(c *Client) { c.maxBuffered = 3 })
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	p1.expectEvent(t, "r-1", 1)

	release := holdTickets(f, 2)
	defer release()
	p1.drop()
	f.waitTicketN(t, 2)
	close(down)
	if err := <-full; !errors.Is(err, context.Canceled) {
		t.Fatalf("Emit on a full buffer = %v, want context.Canceled", err)
	}
	release()
	p2 := f.registeredPeer(t)
	p2.expectAck(t, "r-1") // still holds r-1
	// #1 was written and then dropped from the run's log: with #2–#4
	// waiting, the log holds maxBuffered frames.
	for seq := int64(2); seq <= 5; seq++ {
		ev := p2.expectEvent(t, "r-1", seq)
		if want := float64(seq); ev["value"] != want {
			t.Fatalf("event #%d carries %v", seq, ev["value"])
		}
	}
	p2.expectFinish(t, "r-1")
}
