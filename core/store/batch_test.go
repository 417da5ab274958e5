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

func pseq(n int64) *int64 { return &n }

// A batch is stored in order under consecutive seqs; provider seqs already
// stored this round, or repeated within the batch, are skipped (seq 0), and
// another event under such a seq is refused (SeqTaken).
func TestAppendProviderEventsBatch(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	ev := func(n int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"type":"CUSTOM","n":%d}`, n)) }
	// The round starts when the run is offered.
	for _, to := range []run.Status{run.Offering, run.Running} {
		if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: to, Writer: run.ByBroker, Epoch: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{
		{Event: ev(1), ProviderSeq: pseq(1)}, {Event: ev(2), ProviderSeq: pseq(2)}, {Event: ev(3)}})
	if err != nil || fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("first batch: %v %v", seqs, err)
	}
	seqs, err = st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{
		{Event: ev(2), ProviderSeq: pseq(2)}, {Event: ev(4), ProviderSeq: pseq(3)}, {Event: ev(4), ProviderSeq: pseq(3)}, {Event: ev(5), ProviderSeq: pseq(4)}})
	if err != nil || fmt.Sprint(seqs) != "[0 4 0 5]" {
		t.Fatalf("second batch: %v %v", seqs, err)
	}
	evs, _ := st.EventsAfter(ctx, r.RunID, 0, 100)
	if len(evs) != 5 || string(evs[3].Event) != string(ev(4)) || string(evs[4].Event) != string(ev(5)) {
		t.Fatalf("stored: %+v", evs)
	}
	// Another event under a seq the round took is no resend: not stored,
	// and said so (SeqTaken); a conclusion carrying one is refused whole.
	seqs, err = st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{{Event: ev(7), ProviderSeq: pseq(1)}, {Event: ev(8), ProviderSeq: pseq(9)}, {Event: ev(7), ProviderSeq: pseq(9)}})
	if err != nil || fmt.Sprint(seqs) != fmt.Sprint([]int{store.SeqTaken, 6, store.SeqTaken}) {
		t.Fatalf("seqs taken by other events: %v %v", seqs, err)
	}
	if _, _, err := st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: r.RunID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(7), ProviderSeq: pseq(2)}}}); !errors.Is(err, store.ErrSeqTaken) {
		t.Fatalf("conclude with a taken seq: %v", err)
	}
	if _, err := st.AppendProviderEvents(ctx, epoch-1, r.RunID, []store.NewEvent{{Event: ev(9)}}); err == nil {
		t.Fatal("a stale epoch appended")
	}
	// The conclude stores a final batch with the move.
	done, appended, err := st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: r.RunID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{{Event: ev(5), ProviderSeq: pseq(4)}, {Event: ev(6), ProviderSeq: pseq(5)}}})
	if err != nil || done.Status != run.Completed || len(appended) != 1 || appended[0].Seq != 7 {
		t.Fatalf("conclude: %v %+v %v", done.Status, appended, err)
	}
}

// The batch's dedupe looks at this round only: a run reopened after a
// question numbers its provider seqs afresh, and a resend within the new
// round is still recognised.
func TestAppendProviderEventsDedupePerRound(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	ev := json.RawMessage(`{"type":"CUSTOM","name":"x"}`)
	moves := func(to ...run.Status) {
		t.Helper()
		for _, s := range to {
			w := run.ByBroker
			if s == run.Queued {
				w = run.ByDoor // the caller's answer reopens it
			}
			if _, err := st.Transition(ctx, moveFor(r, s, w, epoch)); err != nil {
				t.Fatalf("move to %s: %v", s, err)
			}
		}
	}
	batch := func(ps ...int64) []store.NewEvent {
		evs := make([]store.NewEvent, len(ps))
		for i, p := range ps {
			evs[i] = store.NewEvent{Event: ev, ProviderSeq: pseq(p)}
		}
		return evs
	}
	moves(run.Offering, run.Running)
	if seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, batch(1, 2, 3)); err != nil || fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("first round: %v %v", seqs, err)
	}
	moves(run.InputRequired, run.Queued, run.Offering, run.Running)
	if seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, batch(1, 2)); err != nil || fmt.Sprint(seqs) != "[4 5]" {
		t.Fatalf("second round, seqs of the first again: %v %v", seqs, err)
	}
	if seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, batch(2, 3, 1, 4)); err != nil || fmt.Sprint(seqs) != "[0 6 0 7]" {
		t.Fatalf("second round, resends: %v %v", seqs, err)
	}
}

// BenchmarkAppendEvents stores 16 events one transaction each (as the
// broker did before batching) and in one batch.
func BenchmarkAppendEvents(b *testing.B) {
	st := storetest.Store(b)
	ctx := context.Background()
	storetest.Agent(b, st, testProviderKey, testAgent)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	runID, threadID := run.NewRunID(), run.NewThreadID()
	if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: testProviderKey, AgentName: testAgent,
		CreateThread: &store.NewThread{}, RunInput: json.RawMessage(`{}`)}); err != nil {
		b.Fatal(err)
	}
	ev := json.RawMessage(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello there"}`)
	var n int64
	b.Run("16_single", func(b *testing.B) {
		for b.Loop() {
			for range 16 {
				n++
				if _, err := st.AppendProviderEvent(ctx, epoch, runID, ev, pseq(n)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("16_batched", func(b *testing.B) {
		batch := make([]store.NewEvent, 16)
		for b.Loop() {
			for i := range batch {
				n++
				batch[i] = store.NewEvent{Event: ev, ProviderSeq: pseq(n)}
			}
			if _, err := st.AppendProviderEvents(ctx, epoch, runID, batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppendProviderEvents stores batches of small events with
// provider seqs into one run, as the broker's lane does during one run's
// stream (the run grows as the benchmark runs, as a long stream does).
// Reported: µs per stored event.
func BenchmarkAppendProviderEvents(b *testing.B) {
	st := storetest.Store(b)
	ctx := context.Background()
	storetest.Agent(b, st, testProviderKey, testAgent)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	ev := json.RawMessage(`{"type":"CUSTOM","name":"load","value":{"t":1764590000000000000,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`)
	for _, size := range []int{1, 64, 700} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			runID, threadID := run.NewRunID(), run.NewThreadID()
			if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: testProviderKey, AgentName: testAgent,
				CreateThread: &store.NewThread{}, RunInput: json.RawMessage(`{}`)}); err != nil {
				b.Fatal(err)
			}
			batch := make([]store.NewEvent, size)
			var n int64
			for b.Loop() {
				for i := range batch {
					n++
					batch[i] = store.NewEvent{Event: ev, ProviderSeq: pseq(n)}
				}
				if _, err := st.AppendProviderEvents(ctx, epoch, runID, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "µs/event")
		})
	}
}

// A resend is the same JSON value, however written (design.md D7): under a
// seq the round stored, and repeated within a batch — where the batch's
// first event under the seq may be another event, refused, and a later one
// the resend of the stored event.
func TestAppendProviderEventsResendIsTheSameValue(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	for _, to := range []run.Status{run.Offering, run.Running} {
		if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: to, Writer: run.ByBroker, Epoch: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(s string) store.NewEvent { return store.NewEvent{Event: json.RawMessage(s), ProviderSeq: pseq(1)} }
	first := `{"type":"CUSTOM","name":"a","value":{"n":1,"s":"A"}}`
	resent := "{ \"value\": {\"s\":\"\\u0041\", \"n\":1.0},\n \"name\":\"a\", \"type\":\"CUSTOM\" }"
	other := `{"type":"CUSTOM","name":"a","value":{"n":2,"s":"A"}}`
	if seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{ev(first), ev(resent)}); err != nil || fmt.Sprint(seqs) != "[1 0]" {
		t.Fatalf("a resend within the batch: %v %v", seqs, err)
	}
	if seqs, err := st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{ev(other), ev(resent)}); err != nil || fmt.Sprint(seqs) != fmt.Sprint([]int{store.SeqTaken, 0}) {
		t.Fatalf("another event, then a resend of the stored one: %v %v", seqs, err)
	}
	done, appended, err := st.Conclude(ctx, store.Conclusion{Move: store.Move{RunID: r.RunID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
		ProviderEvents: []store.NewEvent{ev(resent)}})
	if err != nil || done.Status != run.Completed || len(appended) != 0 {
		t.Fatalf("conclude with a resend: %v %+v %v", done.Status, appended, err)
	}
	if evs, _ := st.EventsAfter(ctx, r.RunID, 0, 100); len(evs) != 1 || string(evs[0].Event) != first {
		t.Fatalf("stored: %+v", evs)
	}
}
