package a2a

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// A send answers from the end marker only when the marker is the whole
// record of the round its tail followed from seq 1; any other marker —
// an older broker's (status only), one over its cap, one that does not
// parse or says another status or round, one for a run the request did
// not write — sends it to the record, as before.
func TestMarkedViewOnlyFromAWholeOutcome(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456000, time.UTC)
	good, _ := livefeed.MarshalOutcome(livefeed.Outcome{Status: "completed", LastSeq: 2, LastActivityAt: at,
		Messages: []livefeed.OutcomeMessage{{ID: "msg_a", Message: json.RawMessage(`{"role":"assistant","content":"hi"}`)}}})
	other, _ := livefeed.MarshalOutcome(livefeed.Outcome{Status: "failed", LastSeq: 2, LastActivityAt: at, FailureReason: "x"})
	later, _ := livefeed.MarshalOutcome(livefeed.Outcome{Status: "completed", LastSeq: 3, LastActivityAt: at})
	acc := accepted{run: store.Run{RunID: "run_1", ThreadID: "thr_1", Status: "queued"}, fresh: true,
		msgs: []store.Message{{MessageID: "msg_u", Message: json.RawMessage(`{"role":"user","content":"hello"}`)}}}
	tailed := newFold(-1, true)
	tailed.add(1, json.RawMessage(`{"type":"RUN_STARTED"}`))
	tailed.add(2, json.RawMessage(`{"type":"RUN_FINISHED"}`))
	tail := &door.Tail{RunID: "run_1", After: 2}

	v, r, ok := markedView(acc, tail, livefeed.Entry{Seq: 2, End: "completed", Outcome: good}, tailed)
	if !ok || v.State != StateCompleted || !v.Timestamp.Equal(at) || len(v.History) != 2 ||
		v.History[0].ID != "msg_u" || v.History[1].ID != "msg_a" || r.Status != "completed" || r.LastSeq != 2 {
		t.Fatalf("a whole outcome: ok %v, view %+v, run %+v", ok, v, r)
	}
	notFresh := acc
	notFresh.fresh = false
	resumed := acc
	resumed.after = 1
	for name, c := range map[string]struct {
		acc accepted
		m   livefeed.Entry
	}{
		"an older broker's marker":     {acc, livefeed.Entry{Seq: 2, End: "completed"}},
		"an outcome over its cap":      {acc, livefeed.Entry{Seq: 2, End: "completed", OutcomeOmitted: true}},
		"an outcome that is not one":   {acc, livefeed.Entry{Seq: 2, End: "completed", Outcome: json.RawMessage(`{"status":"completed"}`)}},
		"an outcome of another status": {acc, livefeed.Entry{Seq: 2, End: "completed", Outcome: other}},
		"an outcome of another round":  {acc, livefeed.Entry{Seq: 2, End: "completed", Outcome: later}},
		"a marker of another round":    {acc, livefeed.Entry{Seq: 3, End: "completed", Outcome: later}},
		"a run the request found":      {notFresh, livefeed.Entry{Seq: 2, End: "completed", Outcome: good}},
		"a tail from past seq 1":       {resumed, livefeed.Entry{Seq: 2, End: "completed", Outcome: good}},
		"an unsettled status":          {acc, livefeed.Entry{Seq: 2, End: "running", Outcome: mustOutcome(t, "running")}},
	} {
		if _, _, ok := markedView(c.acc, tail, c.m, tailed); ok {
			t.Errorf("%s: answered from the marker", name)
		}
	}
}

func mustOutcome(t *testing.T, status string) json.RawMessage {
	t.Helper()
	raw, ok := livefeed.MarshalOutcome(livefeed.Outcome{Status: status, LastSeq: 2, LastActivityAt: time.Now()})
	if !ok {
		t.Fatal("outcome over the cap")
	}
	return raw
}
