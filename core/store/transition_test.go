package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

func moveFor(r store.Run, to run.Status, w run.Writer, epoch int64) store.Move {
	m := store.Move{RunID: r.RunID, To: to, Writer: w}
	if w == run.ByBroker {
		m.Epoch = epoch
	}
	switch to {
	case run.Failed:
		m.Reason = run.ReasonProviderLeftHoldingIt
	case run.InputRequired:
		m.Interrupt = json.RawMessage(`{"id":"int_1","reason":"confirm"}`)
	}
	return m
}

// Every (writer, from, to) triple: the legal ones apply and say so in the
// row; every other one is refused with the status found and changes nothing.
func TestEveryTransition(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	legalSeen := 0
	for _, w := range []run.Writer{run.ByBroker, run.ByDoor} {
		for _, from := range run.All {
			for _, to := range run.All {
				t.Run(fmt.Sprintf("%s/%s->%s", w, from, to), func(t *testing.T) {
					r := newRun(t, st)
					forceStatus(t, st, r.RunID, from)
					before, err := st.GetRun(ctx, r.RunID)
					if err != nil {
						t.Fatal(err)
					}
					got, err := st.Transition(ctx, moveFor(r, to, w, epoch))
					if run.Legal(w, from, to) {
						legalSeen++
						if err != nil {
							t.Fatalf("legal move refused: %v", err)
						}
						if got.Status != to {
							t.Fatalf("status = %s, want %s", got.Status, to)
						}
						checkWritten(t, got, before, w, epoch)
						return
					}
					var te *store.TransitionError
					if !errors.As(err, &te) || !errors.Is(err, store.ErrIllegalTransition) {
						t.Fatalf("illegal move: err = %v, want a TransitionError", err)
					}
					if te.From != "" && te.From != from {
						t.Fatalf("error reports status %s, the run was %s", te.From, from)
					}
					after, _ := st.GetRun(ctx, r.RunID)
					if !reflect.DeepEqual(before, after) {
						t.Fatalf("refused move changed the row:\nbefore %+v\nafter  %+v", before, after)
					}
				})
			}
		}
	}
	want := 0
	for _, tr := range run.Transitions() {
		want += len(tr.From)
	}
	if legalSeen != want {
		t.Fatalf("exercised %d legal transitions, the machine has %d", legalSeen, want)
	}
}

func checkWritten(t *testing.T, got, before store.Run, w run.Writer, epoch int64) {
	t.Helper()
	switch got.Status {
	case run.Running:
		if got.StartedAt == nil {
			t.Error("running without started_at")
		}
	case run.Completed, run.Cancelled:
		if got.CompletedAt == nil {
			t.Error("terminal without completed_at")
		}
	case run.Failed:
		if got.CompletedAt == nil || got.FailureReason != string(run.ReasonProviderLeftHoldingIt) {
			t.Errorf("failed: completed_at=%v reason=%q", got.CompletedAt, got.FailureReason)
		}
	case run.InputRequired:
		if string(got.Interrupt) == "" {
			t.Error("input-required without its interrupt")
		}
	case run.Queued:
		if before.Status == run.InputRequired && !got.QueuedAt.After(before.QueuedAt) {
			t.Error("a reopened run keeps its old queued_at; the unserved clock would start in the past")
		}
	}
	if w == run.ByBroker && got.OwnerEpoch != epoch {
		t.Errorf("owner_epoch = %d, want %d", got.OwnerEpoch, epoch)
	}
	if w == run.ByDoor && got.OwnerEpoch != before.OwnerEpoch {
		t.Errorf("a door write changed owner_epoch")
	}
}

// A deposed leader's write changes nothing and says its epoch is stale.
func TestStaleEpochChangesNothing(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	old, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	cur, err := st.AdvanceEpoch(ctx, "node-b")
	if err != nil || cur != old+1 {
		t.Fatalf("advance: %d %v", cur, err)
	}
	before, _ := st.GetRun(ctx, r.RunID)
	for _, epoch := range []int64{old, cur + 1} {
		_, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch})
		var se *store.StaleEpochError
		if !errors.As(err, &se) || !errors.Is(err, store.ErrStaleEpoch) {
			t.Fatalf("epoch %d: err = %v, want StaleEpochError", epoch, err)
		}
		if se.Have != epoch || se.Current != cur {
			t.Fatalf("error says have %d current %d; want %d and %d", se.Have, se.Current, epoch, cur)
		}
		if _, err := st.AppendEvent(ctx, epoch, r.RunID, json.RawMessage(`{"type":"RUN_STARTED"}`)); !errors.Is(err, store.ErrStaleEpoch) {
			t.Fatalf("append under epoch %d: err = %v, want stale", epoch, err)
		}
	}
	after, _ := st.GetRun(ctx, r.RunID)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("stale write changed the run:\nbefore %+v\nafter  %+v", before, after)
	}
	events, _ := st.EventsAfter(ctx, r.RunID, 0, 10)
	if len(events) != 0 {
		t.Fatalf("stale append stored %d events", len(events))
	}
	// The current leader's write lands.
	if _, err := st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: cur}); err != nil {
		t.Fatalf("current leader refused: %v", err)
	}
}

func TestTransitionUnknownRun(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	_, err := st.Transition(ctx, store.Move{RunID: "run_000000000000000000000000", To: run.Offering, Writer: run.ByBroker, Epoch: epoch})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestTransitionRefusesMalformedMoves(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	for name, m := range map[string]store.Move{
		"failed without reason":  {RunID: r.RunID, To: run.Failed, Writer: run.ByBroker, Epoch: epoch},
		"reason on a non-failed": {RunID: r.RunID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Reason: "x"},
		"broker without epoch":   {RunID: r.RunID, To: run.Offering, Writer: run.ByBroker},
		"door writing offering":  {RunID: r.RunID, To: run.Offering, Writer: run.ByDoor},
	} {
		if _, err := st.Transition(ctx, m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	got, _ := st.GetRun(ctx, r.RunID)
	if got.Status != run.Queued {
		t.Fatalf("status = %s after refused moves", got.Status)
	}
}

// Concurrent answers to one pause resolve to exactly one reopen (D1).
func TestConcurrentReopenHasOneWinner(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	r := newRun(t, st)
	forceStatus(t, st, r.RunID, run.InputRequired)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.Transition(ctx, store.Move{RunID: r.RunID, To: run.Queued, Writer: run.ByDoor,
				RunInput: json.RawMessage(fmt.Sprintf(`{"answer":%d}`, i))})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, store.ErrIllegalTransition):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d answers reopened the run, want exactly 1", wins)
	}
}

func TestAppendEventSequence(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
	for i := 1; i <= 3; i++ {
		seq, err := st.AppendEvent(ctx, epoch, r.RunID, json.RawMessage(fmt.Sprintf(`{"type":"CUSTOM","n":%d}`, i)))
		if err != nil || seq != i {
			t.Fatalf("append %d: seq=%d err=%v", i, seq, err)
		}
	}
	evs, err := st.EventsAfter(ctx, r.RunID, 1, 10)
	if err != nil || len(evs) != 2 || evs[0].Seq != 2 || string(evs[1].Event) != `{"type":"CUSTOM","n":3}` {
		t.Fatalf("events after 1: %+v %v", evs, err)
	}
	if _, err := st.AppendEvent(ctx, epoch, "run_ffffffffffffffffffffffff", json.RawMessage(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to unknown run: %v", err)
	}
	// The foreign key is real: no event row can name a missing run.
	_, err = st.Pool().Exec(ctx, `INSERT INTO run_events (run_id, seq, event) VALUES ('nope', 1, '{}')`)
	if err == nil {
		t.Fatal("run_events accepted an event for a run that does not exist")
	}
	_, err = st.Pool().Exec(ctx, `INSERT INTO run_events (run_id, seq, event) VALUES ($1, 1, '{}')`, r.RunID)
	if err == nil {
		t.Fatal("run_events accepted a second event with seq 1")
	}
}
