package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A stale resend of an earlier round is known by its events' values under
// their seqs (design.md D7, "A resend is the same JSON value"): written
// otherwise — members reordered, a string escaped, a number spelled
// otherwise — it still repeats the earlier round; a value that differs
// does not.
func TestEarlierRoundRepeatsTheSameValue(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	epoch, _ := st.AdvanceEpoch(ctx, "node-a")
	r := newRun(t, st)
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
	ev := func(seq int64, s string) store.NewEvent {
		return store.NewEvent{Event: json.RawMessage(s), ProviderSeq: pseq(seq)}
	}
	first := `{"type":"CUSTOM","name":"q","value":{"n":1,"s":"A"}}`
	moves(run.Offering, run.Running)
	if _, err := st.AppendProviderEvents(ctx, epoch, r.RunID, []store.NewEvent{ev(1, first), ev(2, `{"type":"CUSTOM","name":"r"}`)}); err != nil {
		t.Fatal(err)
	}
	moves(run.InputRequired, run.Queued, run.Offering, run.Running)
	earlier, repeats, err := st.EarlierRoundRepeats(ctx, r.RunID, []store.NewEvent{
		ev(1, first),
		ev(1, "{ \"value\":{\"s\":\"\\u0041\",\"n\":1.0}, \"name\":\"q\", \"type\":\"CUSTOM\" }"),
		ev(1, `{"type":"CUSTOM","name":"q","value":{"n":2,"s":"A"}}`),
		ev(2, `{"name":"r","type":"CUSTOM"}`),
		ev(3, `{"type":"CUSTOM","name":"r"}`),
	})
	if err != nil || !earlier || fmt.Sprint(repeats) != "[true true false true false]" {
		t.Fatalf("earlier %v, repeats %v, %v; want [true true false true false]", earlier, repeats, err)
	}
}
