package provider

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// reportAgent announces each start on g.started, emits RUN_STARTED, waits
// for its gate and then emits RUN_FINISHED.
func reportAgent(g *gates) Agent {
	return Agent{Name: "a", Handler: func(ctx context.Context, run *Run) error {
		g.started <- run
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		select {
		case <-g.gate(run.ID):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
	}}
}

// fakeClock is a Client.now the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	k := &fakeClock{}
	k.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return k
}

func (k *fakeClock) now() time.Time           { return time.Unix(0, k.ns.Load()) }
func (k *fakeClock) advance(d time.Duration)  { k.ns.Add(int64(d)) }
func (k *fakeClock) install() func(c *Client) { return func(c *Client) { c.now = k.now } }

// retainedIDs lists the finished runs c keeps, oldest first.
func retainedIDs(c *Client) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, rs := range c.retainedOrder {
		if c.retained[rs.run.ID] == rs {
			ids = append(ids, rs.run.ID)
		}
	}
	return ids
}

// noStart checks that no handler started again and, for the finished runs
// named, that none is held again. Call it after a frame answering the offer
// under test arrived: the offer has been handled by then.
func noStart(t *testing.T, c *Client, g *gates, finished ...string) {
	t.Helper()
	c.mu.Lock()
	for _, id := range finished {
		if c.runs[id] != nil {
			c.mu.Unlock()
			t.Fatalf("finished run %s is held again", id)
		}
	}
	c.mu.Unlock()
	select {
	case r := <-g.started:
		t.Fatalf("handler started again for %s", r.ID)
	default:
	}
}

// Frames written to a link that then dies count for nothing: after the
// reconnect every run still held and every finished run is announced again
// and its frames resent with their seq, finish included.
func TestFramesWrittenBeforeDropAreResent(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, reportAgent(g)))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	p1.expectEvent(t, "r-1", 1)
	g.release("r-1")
	expectFrames(t, p1, "event r-1 #2 RUN_FINISHED", "finish r-1")
	p1.send(t, runFrame("r-2", "a", "t-2", "hi"))
	p1.expectAck(t, "r-2")
	g.waitStarted(t)
	p1.expectEvent(t, "r-2", 1)

	// The broker dies having stored none of it.
	p1.drop()
	p2 := f.registeredPeer(t)
	expectFrames(t, p2,
		"ack r-1 true", // finished: retained
		"event r-1 #1 RUN_STARTED",
		"event r-1 #2 RUN_FINISHED",
		"finish r-1",
		"ack r-2 true", // still running
		"event r-2 #1 RUN_STARTED")

	// A broker that no longer holds the finished run says so: ignored, the
	// run stays retained. For the running one it still ends the handler.
	p2.send(t, wire.Error{Type: wire.TypeError, Message: "finish refused", RunID: "r-1"})
	p2.send(t, wire.Error{Type: wire.TypeError, Message: "event refused: unknown run", RunID: "r-2"})
	// The handler returned ErrRunNotHeld.
	expectFrames(t, p2, "event r-2 #2 RUN_ERROR", "finish r-2")
	noStart(t, c, g, "r-1")
	if ids := retainedIDs(c); !slices.Contains(ids, "r-1") {
		t.Fatalf("retained %v after finish refused, want r-1 kept", ids)
	}
}

// A run offered again after the client finished it (the broker that took it
// died before recording the claim) is accepted and answered from its
// retained frames; the handler does not run twice. A new round of the run
// (another input: a paused run reopened) is handled afresh.
func TestFinishedRunOfferedAgainIsNotHandledTwice(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, reportAgent(g)))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	p1.expectEvent(t, "r-1", 1)
	g.release("r-1")
	expectFrames(t, p1, "event r-1 #2 RUN_FINISHED", "finish r-1")

	// Offered again on the same link.
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	expectFrames(t, p1, "ack r-1 true", "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	noStart(t, c, g, "r-1")

	// And by the next leader, after the reconnect's own resend.
	p1.drop()
	p2 := f.registeredPeer(t)
	expectFrames(t, p2, "ack r-1 true", "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	p2.send(t, runFrame("r-1", "a", "t-1", "hi"))
	expectFrames(t, p2, "ack r-1 true", "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	noStart(t, c, g, "r-1")

	// A reopened round carries another input: a new delivery.
	p2.send(t, runFrame("r-1", "a", "t-1", "the answer"))
	p2.expectAck(t, "r-1")
	if run := g.waitStarted(t); run.ID != "r-1" || run.LastUserText() != "the answer" {
		t.Fatalf("reopened run started as %s %q", run.ID, run.LastUserText())
	}
	// Numbered afresh; its gate is already open, so it finishes at once.
	expectFrames(t, p2, "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	noStart(t, c, g)
}

// A run offered again while its handler still runs is accepted once more,
// with what it reported so far, and not started twice.
func TestRunningRunOfferedAgainResendsItsReport(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, reportAgent(g)))
	p := f.registeredPeer(t)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p.expectAck(t, "r-1")
	g.waitStarted(t)
	p.expectEvent(t, "r-1", 1)
	p.send(t, runFrame("r-1", "a", "t-1", "hi"))
	expectFrames(t, p, "ack r-1 true", "event r-1 #1 RUN_STARTED")
	g.release("r-1")
	expectFrames(t, p, "event r-1 #2 RUN_FINISHED", "finish r-1")
	noStart(t, c, g)
}

// A finished run is forgotten Retention after its finish was written (and
// beyond the cap, oldest first): it is no longer resent, and an offer of it
// is a new run.
func TestRetentionExpiryForgets(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	clock := newFakeClock()
	cfg := baseConfig(t, f, reportAgent(g))
	cfg.Retention = time.Minute
	c, _ := startClient(t, cfg, clock.install(), func(c *Client) { c.maxRetained = 2 })
	p1 := f.registeredPeer(t)
	for _, id := range []string{"r-1", "r-2", "r-3"} {
		g.release(id)
		p1.send(t, runFrame(id, "a", "t-"+id, "hi"))
		p1.expectAck(t, id)
		g.waitStarted(t)
		expectFrames(t, p1, "event "+id+" #1 RUN_STARTED", "event "+id+" #2 RUN_FINISHED", "finish "+id)
		clock.advance(time.Second)
	}
	// The cap keeps the two newest.
	p1.drop()
	p2 := f.registeredPeer(t)
	for _, id := range []string{"r-2", "r-3"} {
		expectFrames(t, p2, "ack "+id+" true", "event "+id+" #1 RUN_STARTED", "event "+id+" #2 RUN_FINISHED", "finish "+id)
	}
	if ids := retainedIDs(c); !slices.Equal(ids, []string{"r-2", "r-3"}) {
		t.Fatalf("retained %v, want [r-2 r-3]", ids)
	}

	// Past Retention nothing is left to resend.
	clock.advance(time.Minute)
	p2.drop()
	p3 := f.registeredPeer(t)
	p3.send(t, runFrame("r-2", "a", "t-r-2", "hi"))
	// The first frame on the new link is the answer to this offer: nothing
	// was announced or resent.
	p3.expectAck(t, "r-2")
	if run := g.waitStarted(t); run.ID != "r-2" {
		t.Fatalf("started %s, want r-2 handled afresh", run.ID)
	}
	expectFrames(t, p3, "event r-2 #1 RUN_STARTED", "event r-2 #2 RUN_FINISHED", "finish r-2")
	if ids := retainedIDs(c); slices.Contains(ids, "r-3") {
		t.Fatalf("retained %v after Retention, want r-3 forgotten", ids)
	}
}

// A negative Retention keeps the old behaviour: a finished run is forgotten
// once its finish is written.
func TestNegativeRetentionDisables(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, reportAgent(g))
	cfg.Retention = -1
	startClient(t, cfg)
	p1 := f.registeredPeer(t)
	g.release("r-1")
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	expectFrames(t, p1, "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	p1.drop()
	p2 := f.registeredPeer(t)
	p2.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p2.expectAck(t, "r-1")
	g.waitStarted(t)
	expectFrames(t, p2, "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
}

// A run that finished paused (interrupt outcome) may be reopened by funduq
// with a new input, so it is not announced after a reconnect, where its
// stale report could answer the new round: its unconfirmed round is resent
// before register instead, where only a run still held for the lost link
// takes it. An offer of the same round is still answered from its frames.
func TestPausedRunIsNotAnnouncedAfterReconnect(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	pause := Agent{Name: "a", Handler: func(ctx context.Context, run *Run) error {
		g.started <- run
		return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "i-1", "reason": "approval"}}}})
	}}
	c, _ := startClient(t, baseConfig(t, f, pause))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	expectFrames(t, p1, "event r-1 #1 RUN_FINISHED", "finish r-1")
	p1.drop()
	p2 := f.registeredPeer(t)
	if got, want := p2.earlyFrames(t), []string{"event r-1 #1 RUN_FINISHED", "finish r-1"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q before register, want the paused round %q", got, want)
	}
	p2.send(t, runFrame("r-1", "a", "t-1", "hi"))
	// The first frame after register answers the offer: nothing was
	// announced there.
	expectFrames(t, p2, "ack r-1 true", "event r-1 #1 RUN_FINISHED", "finish r-1")
	noStart(t, c, g, "r-1")
}

// funduq refusing a paused round resent before register ("unknown run": the
// run was reopened or ended since) is the expected answer: the client
// registers all the same and does not resend the round on a later link.
func TestRefusedPausedRoundIsNotResentAgain(t *testing.T) {
	f := newFakeFunduq(t)
	f.setHooks(func(f *fakeFunduq) {
		f.afterRegister = func(n int, p *peer) bool {
			if n != 2 {
				return false
			}
			for _, raw := range p.early {
				kind := "event"
				if typ, _ := wire.PeekType(raw); typ == wire.TypeFinish {
					kind = "finish"
				}
				_ = p.write(wire.Error{Type: wire.TypeError, RunID: "r-1", Message: kind + " refused: unknown run"})
			}
			_ = p.write(wire.Registered{Type: wire.TypeRegistered, Names: []string{"a"}})
			return true
		}
	})
	g := newGates()
	pause := Agent{Name: "a", Handler: func(ctx context.Context, run *Run) error {
		g.started <- run
		return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "i-1", "reason": "approval"}}}})
	}}
	startClient(t, baseConfig(t, f, pause))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	expectFrames(t, p1, "event r-1 #1 RUN_FINISHED", "finish r-1")
	p1.drop()
	p2 := f.registeredPeer(t)
	if got := p2.earlyFrames(t); len(got) != 2 {
		t.Fatalf("sent %q before register, want the paused round", got)
	}
	// A barrier: the client answers a frame after register only once its
	// handshake, refusals and all, is through.
	p2.send(t, runFrame("r-x", "unserved", "t-2", "hi"))
	p2.expectAck(t, "r-x")
	p2.drop()
	p3 := f.registeredPeer(t)
	if got := p3.earlyFrames(t); len(got) != 0 {
		t.Fatalf("sent %q before register after funduq refused the round, want nothing", got)
	}
}

// A run whose round paused is still held when its link drops — the handler
// emitted RUN_FINISHED with an interrupt and has not returned, so the
// finish is not written. funduq pauses such a run at once on the stored
// RUN_FINISHED, and an answer may reopen it: the round goes out before
// register, never after, where the key's report would be taken for the new
// round (the late ack, D15). Refused there, what the old round still sends
// (its finish) is not sent, and the new round is handled afresh.
func TestHeldPausedRoundGoesBeforeRegister(t *testing.T) {
	f := newFakeFunduq(t)
	f.setHooks(func(f *fakeFunduq) {
		f.afterRegister = func(n int, p *peer) bool {
			if n != 2 {
				return false
			}
			for range p.early {
				_ = p.write(wire.Error{Type: wire.TypeError, RunID: "r-1", Message: "event refused: unknown run"})
			}
			_ = p.write(wire.Registered{Type: wire.TypeRegistered, Names: []string{"a"}})
			return true
		}
	})
	g := newGates()
	release := make(chan struct{})
	returned := make(chan struct{})
	ask := Agent{Name: "a", Handler: func(ctx context.Context, run *Run) error {
		g.started <- run
		if run.LastUserText() != "hi" {
			return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
		}
		defer close(returned)
		if err := run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "i-1", "reason": "approval"}}}}); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	c, _ := startClient(t, baseConfig(t, f, ask))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	expectFrames(t, p1, "event r-1 #1 RUN_FINISHED")
	p1.drop()
	p2 := f.registeredPeer(t)
	if got, want := p2.earlyFrames(t), []string{"event r-1 #1 RUN_FINISHED"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q before register, want the held paused round %q", got, want)
	}
	// The answer reopened the run: its new round is offered and handled,
	// and the first frame after register answers that offer.
	p2.send(t, runFrame("r-1", "a", "t-1", "yes"))
	expectFrames(t, p2, "ack r-1 true")
	if r := g.waitStarted(t); r.LastUserText() != "yes" {
		t.Fatalf("handler called with %q, want the answer", r.LastUserText())
	}
	expectFrames(t, p2, "event r-1 #1 RUN_FINISHED", "finish r-1")
	// The old round's handler returns: its finish is not sent. r-2's
	// frames come behind anything queued before its offer.
	close(release)
	<-returned
	for {
		c.mu.Lock()
		idle, wait := c.inFlight == 0, c.changed
		c.mu.Unlock()
		if idle {
			break
		}
		<-wait
	}
	p2.send(t, runFrame("r-2", "a", "t-2", "next"))
	expectFrames(t, p2, "ack r-2 true", "event r-2 #1 RUN_FINISHED", "finish r-2")
	g.waitStarted(t)
}
