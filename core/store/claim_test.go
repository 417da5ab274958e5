package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A claim with the events sent behind it is one write: the run is running,
// its round starts at the claim, the events are stored after it — and the
// claim may carry the run's end too.
func TestClaimWithEvents(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	ev := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"type":"CUSTOM","n":%d}`, n)) }
	offered := func() store.Run {
		r := newRun(t, st)
		if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch}); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Claim and events, the run goes on.
	r := offered()
	got, appended, err := st.Conclude(ctx, store.Conclusion{Claim: true,
		Move:           store.Move{RunID: r.RunID, To: run.Running, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(1), ProviderSeq: pseq(1)}, {Event: ev(2), ProviderSeq: pseq(2)}, {Event: ev(2), ProviderSeq: pseq(2)}}})
	if err != nil || got.Status != run.Running || got.StartedAt == nil || got.RoundSeq != 0 || got.LastSeq != 2 || len(appended) != 2 {
		t.Fatalf("claim: status %s started %v round %d last %d appended %+v err %v", got.Status, got.StartedAt, got.RoundSeq, got.LastSeq, appended, err)
	}
	// The round is the claim's: a resend of what it stored is recognised.
	seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{{Event: ev(2), ProviderSeq: pseq(2)}, {Event: ev(3), ProviderSeq: pseq(3)}})
	if err != nil || fmt.Sprint(seqs) != "[0 3]" {
		t.Fatalf("after the claim: %v %v", seqs, err)
	}
	// A second claim of a running run is refused and stores nothing.
	_, _, err = st.Conclude(ctx, store.Conclusion{Claim: true, Move: store.Move{RunID: r.RunID, To: run.Running, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(9)}}})
	var te *store.TransitionError
	if !errors.As(err, &te) || te.From != run.Running {
		t.Fatalf("second claim: %v", err)
	}
	if evs, _ := st.EventsAfter(ctx, r.RunID, 0, 100); len(evs) != 3 {
		t.Fatalf("stored after a refused claim: %d events", len(evs))
	}

	// Claim, events and the end in one write.
	r = offered()
	got, appended, err = st.Conclude(ctx, store.Conclusion{Claim: true,
		Move:           store.Move{RunID: r.RunID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(1), ProviderSeq: pseq(1)}},
		AgentMessages:  []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"assistant","content":"hi"}`)}}})
	if err != nil || got.Status != run.Completed || got.StartedAt == nil || got.CompletedAt == nil || len(appended) != 1 {
		t.Fatalf("claim and end: %s %v %+v %v", got.Status, got.StartedAt, appended, err)
	}
	msgs, err := st.ThreadMessages(ctx, r.ThreadID, 100)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("thread messages after claim and end: %d %v", len(msgs), err)
	}

	// Without Claim, running is not Conclude's to write.
	r = offered()
	if _, _, err := st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: r.RunID, To: run.Running, Writer: run.ByBroker, Epoch: epoch}}); err == nil {
		t.Fatal("Conclude wrote running without a claim")
	}
	// A stale epoch claims nothing.
	if _, err := st.AdvanceEpoch(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Conclude(ctx, store.Conclusion{Claim: true, Move: store.Move{RunID: r.RunID, To: run.Running, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(1)}}}); !errors.Is(err, store.ErrStaleEpoch) {
		t.Fatalf("stale claim: %v", err)
	}
	if cur, _ := st.GetRun(ctx, r.RunID); cur.Status != run.Offering || cur.LastSeq != 0 {
		t.Fatalf("after a stale claim: %s, last seq %d", cur.Status, cur.LastSeq)
	}
}

// A lazy move (no wait for the WAL flush) is the same write: fenced, legal
// moves only, visible at once.
func TestLazyMove(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	got, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Lazy: true})
	if err != nil || got.Status != run.Offering || got.OwnerEpoch != epoch {
		t.Fatalf("lazy offering: %+v %v", got, err)
	}
	if cur, _ := st.GetRun(ctx, r.RunID); cur.Status != run.Offering {
		t.Fatalf("read after a lazy move: %s", cur.Status)
	}
	// A brief move says only which run, which thread and where it is now.
	back, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Queued, Writer: run.ByBroker, Epoch: epoch, Lazy: true, Brief: true})
	if err != nil || back.RunID != r.RunID || back.ThreadID != r.ThreadID || back.Status != run.Queued || len(back.RunInput) != 0 {
		t.Fatalf("brief requeue: %+v %v", back, err)
	}
	if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Brief: true}); err != nil {
		t.Fatalf("brief offering: %v", err)
	}
	var te *store.TransitionError
	if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Lazy: true}); !errors.As(err, &te) || te.From != run.Offering {
		t.Fatalf("lazy offering of an offered run: %v", err)
	}
	if _, err := st.AdvanceEpoch(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Queued, Writer: run.ByBroker, Epoch: epoch, Lazy: true}); !errors.Is(err, store.ErrStaleEpoch) {
		t.Fatalf("stale lazy requeue: %v", err)
	}
	if cur, _ := st.GetRun(ctx, r.RunID); cur.Status != run.Offering {
		t.Fatalf("after a stale lazy move: %s", cur.Status)
	}
	// The pool still works: the refused pipelined writes left no connection
	// inside a transaction.
	for range 8 {
		if _, err := st.GetRun(ctx, r.RunID); err != nil {
			t.Fatal(err)
		}
	}
}

// A stream's check of the record reads the events, then the status, in one
// round trip; a run that does not exist says so.
func TestEventsAndRun(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Lazy: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Conclude(ctx, store.Conclusion{Claim: true, Move: store.Move{RunID: r.RunID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: json.RawMessage(`{"type":"RUN_STARTED"}`)}, {Event: json.RawMessage(`{"type":"RUN_FINISHED"}`)}}}); err != nil {
		t.Fatal(err)
	}
	evs, cur, err := st.EventsAndRun(ctx, r.RunID, 1, 10)
	if err != nil || len(evs) != 1 || evs[0].Seq != 2 || cur.Status != run.Completed || cur.LastSeq != 2 {
		t.Fatalf("events after 1: %+v, run %s last %d, err %v", evs, cur.Status, cur.LastSeq, err)
	}
	if _, _, err := st.EventsAndRun(ctx, "run_nope", 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}
