package provider

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

// turnTaker is a gated handler that records, per thread, the order runs
// started and whether two of a thread's runs were ever active at once.
type turnTaker struct {
	*gates
	mu      sync.Mutex
	active  map[string]int
	order   map[string][]string
	overlap []string
}

func newTurnTaker() *turnTaker {
	return &turnTaker{gates: newGates(), active: map[string]int{}, order: map[string][]string{}}
}

func (tt *turnTaker) handler(ctx context.Context, run *Run) error {
	tt.mu.Lock()
	tt.active[run.ThreadID]++
	if tt.active[run.ThreadID] > 1 {
		tt.overlap = append(tt.overlap, run.ID)
	}
	tt.order[run.ThreadID] = append(tt.order[run.ThreadID], run.ID)
	tt.mu.Unlock()
	defer func() {
		tt.mu.Lock()
		tt.active[run.ThreadID]--
		tt.mu.Unlock()
	}()
	if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
		return err
	}
	return tt.gates.handler(ctx, run)
}

// expectFrames reads len(want) frames and checks them in order.
func expectFrames(t *testing.T, p *peer, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := p.nextFrame(t).String(); got != w {
			t.Fatalf("frame %q, want %q", got, w)
		}
	}
}

// expectFrameSet reads len(want) frames in any order.
func expectFrameSet(t *testing.T, p *peer, want ...string) {
	t.Helper()
	var got []string
	for range want {
		got = append(got, p.nextFrame(t).String())
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
}

func TestSerializePerThread(t *testing.T) {
	f := newFakeFunduq(t)
	tt := newTurnTaker()
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: tt.handler})
	cfg.SerializePerThread = true
	startClient(t, cfg)
	p := f.registeredPeer(t)

	for _, r := range []struct{ id, thread string }{{"a1", "A"}, {"a2", "A"}, {"b1", "B"}, {"a3", "A"}} {
		p.send(t, runFrame(r.id, "a", r.thread, r.id))
	}
	// The answer is a receipt: runs queued behind their thread are accepted
	// too, in arrival order. a1 and b1 run side by side (each after its
	// ack); a2 and a3 wait for a1.
	var acks []string
	seen := map[string]bool{}
	for range 6 {
		fr := p.nextFrame(t)
		switch fr.Type {
		case wire.TypeAck:
			acks = append(acks, fr.String())
			seen[fr.RunID] = true
		case wire.TypeEvent:
			if !seen[fr.RunID] || (fr.RunID != "a1" && fr.RunID != "b1") || fr.Event["type"] != "RUN_STARTED" {
				t.Fatalf("unexpected %v", fr)
			}
		default:
			t.Fatalf("unexpected %v", fr)
		}
	}
	if !slices.Equal(acks, []string{"ack a1 true", "ack a2 true", "ack b1 true", "ack a3 true"}) {
		t.Fatalf("acks %q", acks)
	}
	first := map[string]bool{tt.waitStarted(t).ID: true, tt.waitStarted(t).ID: true}
	if !first["a1"] || !first["b1"] {
		t.Fatalf("first to start: %v, want a1 and b1", first)
	}

	// a1 ends; only then does a2 start.
	tt.release("a1")
	expectFrames(t, p, "finish a1", "event a2 #1 RUN_STARTED")
	if r := tt.waitStarted(t); r.ID != "a2" {
		t.Fatalf("started %s, want a2", r.ID)
	}
	tt.release("b1")
	expectFrames(t, p, "finish b1")
	tt.release("a2")
	expectFrames(t, p, "finish a2", "event a3 #1 RUN_STARTED")
	if r := tt.waitStarted(t); r.ID != "a3" {
		t.Fatalf("started %s, want a3", r.ID)
	}
	tt.release("a3")
	expectFrames(t, p, "finish a3")

	tt.mu.Lock()
	defer tt.mu.Unlock()
	if len(tt.overlap) != 0 {
		t.Fatalf("runs overlapped their thread: %v", tt.overlap)
	}
	if !slices.Equal(tt.order["A"], []string{"a1", "a2", "a3"}) {
		t.Fatalf("thread A ran %v", tt.order["A"])
	}
}

func TestSerializedQueueCountsAndCancels(t *testing.T) {
	f := newFakeFunduq(t)
	tt := newTurnTaker()
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: tt.handler})
	cfg.SerializePerThread = true
	cfg.MaxConcurrentRuns = intp(2)
	startClient(t, cfg)
	p := f.registeredPeer(t)

	p.send(t, runFrame("a1", "a", "A", "x"))
	wantVerdict(t, p.expectAck(t, "a1"), wire.Accepted, "")
	expectFrames(t, p, "event a1 #1 RUN_STARTED")
	p.send(t, runFrame("a2", "a", "A", "x"))
	wantVerdict(t, p.expectAck(t, "a2"), wire.Accepted, "")
	// A queued run holds a place: the client is full.
	p.send(t, runFrame("b1", "a", "B", "x"))
	wantVerdict(t, p.expectAck(t, "b1"), wire.Declined, "")

	// Cancelling the queued run drops it and finishes it at once, while a1
	// still runs; its place is free again.
	p.send(t, wire.Cancel{Type: wire.TypeCancel, RunID: "a2"})
	expectFrames(t, p, "finish a2")
	p.send(t, runFrame("b2", "a", "B", "x"))
	wantVerdict(t, p.expectAck(t, "b2"), wire.Accepted, "")
	expectFrames(t, p, "event b2 #1 RUN_STARTED")

	tt.release("a1")
	tt.release("b2")
	expectFrameSet(t, p, "finish a1", "finish b2")
	// A's queue goes on with its next run; a2 never started.
	p.send(t, runFrame("a3", "a", "A", "x"))
	wantVerdict(t, p.expectAck(t, "a3"), wire.Accepted, "")
	expectFrames(t, p, "event a3 #1 RUN_STARTED")
	tt.release("a3")
	expectFrames(t, p, "finish a3")

	tt.mu.Lock()
	defer tt.mu.Unlock()
	if !slices.Equal(tt.order["A"], []string{"a1", "a3"}) {
		t.Fatalf("thread A ran %v", tt.order["A"])
	}
}

// A run still queued behind its thread when the client shuts down never
// starts, so nothing of the agent says how it ended: a bare finish would
// read as a stream that ended without finishing
// (provider_stream_ended_without_finishing). The client ends it with a
// RUN_ERROR naming the shutdown, so its caller knows what happened.
func TestShutdownEndsAQueuedRunWithARunError(t *testing.T) {
	f := newFakeFunduq(t)
	tt := newTurnTaker()
	cfg := baseConfig(t, f, Agent{Name: "a", Handler: tt.handler})
	cfg.SerializePerThread = true
	_, stop := startClient(t, cfg)
	p := f.registeredPeer(t)

	p.send(t, runFrame("a1", "a", "A", "x"))
	wantVerdict(t, p.expectAck(t, "a1"), wire.Accepted, "")
	expectFrames(t, p, "event a1 #1 RUN_STARTED")
	p.send(t, runFrame("a2", "a", "A", "x"))
	wantVerdict(t, p.expectAck(t, "a2"), wire.Accepted, "")

	go stop()
	var a2 []string
	for _, raw := range p.closed(t) {
		var fr frame
		_ = json.Unmarshal(raw, &fr)
		if fr.RunID == "a2" {
			a2 = append(a2, fr.String())
		}
	}
	if !slices.Equal(a2, []string{"event a2 #1 RUN_ERROR", "finish a2"}) {
		t.Fatalf("the queued run's frames at the shutdown: %q, want its RUN_ERROR and finish", a2)
	}
}
