package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// poison is the text of an event PostgreSQL refuses in these tests: a
// write of provider events holding it is refused for its data (SQLSTATE
// class 22, which no retry changes), as a value PostgreSQL cannot hold
// would be that slipped past the event checks (design.md D18).
const poison = "poison-for-postgresql"

func refusePoison(h *nodetest.Harness) {
	h.Store.InjectFaults(&store.Faults{Events: func(evs []store.NewEvent) error {
		for _, e := range evs {
			if bytes.Contains(e.Event, []byte(poison)) {
				return &pgconn.PgError{Code: "22P02", Message: "injected: a value PostgreSQL cannot hold"}
			}
		}
		return nil
	}})
}

// refusals reads error frames until n have come, counting those in got
// first (what a barrier returned), and fails on any other frame. Every
// report funduq does not take is answered by one (design.md D15), so n is
// the reports it refused; the answers may trail a barrier's answer.
func refusals(t *testing.T, p *nodetest.Prov, got [][]byte, n int) []wire.Error {
	t.Helper()
	var out []wire.Error
	for len(out) < n {
		var f []byte
		if len(got) > 0 {
			f, got = got[0], got[1:]
		} else {
			_, f = p.Next()
		}
		var e wire.Error
		if typ, _ := wire.PeekType(f); typ != wire.TypeError || json.Unmarshal(f, &e) != nil {
			t.Fatalf("unexpected frame: %s", f)
		}
		out = append(out, e)
	}
	if len(got) > 0 {
		t.Fatalf("unexpected frame: %s", got[0])
	}
	return out
}

// checkRefusals asserts that errs all name run id, and that one says the
// run failed malformed_event.
func checkRefusals(t *testing.T, errs []wire.Error, id string) {
	t.Helper()
	malformed := false
	for _, e := range errs {
		if e.RunID != id || !strings.Contains(e.Message, " refused") {
			t.Fatalf("error %+v, want a refusal naming run %s", e, id)
		}
		malformed = malformed || strings.Contains(e.Message, string(run.ReasonMalformedEvent))
	}
	if !malformed {
		t.Fatalf("refusals %+v: none says the run failed %s", errs, run.ReasonMalformedEvent)
	}
}

// settled waits until run id is terminal and returns it.
func settled(h *nodetest.Harness, id string) store.Run {
	var r store.Run
	h.Eventually("run "+id+" settles", func() bool { r = h.Run(id); return r.Status.Terminal() })
	return r
}

// checkFailedMalformed asserts what a caller and the record see of a run
// failed for an event PostgreSQL refused: failed malformed_event, the
// events stored up to the refused one and a RUN_ERROR last.
func checkFailedMalformed(t *testing.T, h *nodetest.Harness, id string, want []string) {
	t.Helper()
	r := settled(h, id)
	if r.Status != run.Failed || r.FailureReason != string(run.ReasonMalformedEvent) {
		t.Fatalf("run %s, reason %q; want failed %s (a run missing an event it was sent must not read as %s)",
			r.Status, r.FailureReason, run.ReasonMalformedEvent, r.Status)
	}
	var got []string
	for _, e := range h.Events(id) {
		got = append(got, fmt.Sprint(e["type"]))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stored %v, want %v", got, want)
	}
}

// A batch of events PostgreSQL refuses for their data, with no end behind
// it, fails its run malformed_event as an event that fails validation
// does (design.md D18): what precedes the refused event is stored, the
// refused event is answered with an error frame naming the run, the run
// gets a RUN_ERROR, nothing is counted and the broker keeps leading. Before,
// the batch was refused and the run went on: its caller later saw it
// completed without those events.
func TestRefusedEventsFailTheirRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	refusePoison(h)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	refusals(t, p, p.Barrier(), 0)
	p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"`+poison+`"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	// The barrier's answer says those events were taken or refused, so
	// the end below does not ride with them.
	got := p.Barrier()
	// The provider goes on as if its stream were whole: the caller must
	// not see that run completed.
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.Finish(id)
	checkFailedMalformed(t, h, id, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "RUN_ERROR"})
	// The refused event, the one behind it, the end and the finish.
	checkRefusals(t, refusals(t, p, got, 4), id)
	p.None()
	if q := h.Quality(p.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Errorf("a refused event counted %+v", q)
	}
	if !h.Ready() {
		t.Fatal("the broker stepped down")
	}
	h.CompletedRun(p, "echo", "next") // the link carries on
}

// The same for events written with the claim they ride behind (an accept
// and the first events read together): before, the claim's write was
// refused and nothing was answered — the events were dropped unanswered,
// the accept was not taken, and the run stayed queued with an offer nobody
// would answer again.
func TestRefusedEventsWithTheirClaimFailTheirRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	refusePoison(h)
	p := h.Connect(0xe1, nodetest.Limit(1))
	p.Register("echo")
	first, firstThread := h.Door(p.Key, "echo", "", "first")
	p.Offer()
	p.Accept(first)
	h.WaitStatus(first, run.Running)
	id, thread := h.Door(p.Key, "echo", "", "hi")
	h.Taken(id) // waiting for the provider's one place
	// The offering write waits behind this lock, so the accept and the
	// events are read while the lane is in it: the lane reads them
	// together and writes them with the claim (design.md "offering").
	release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	p.Complete(first, firstThread)
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"fine"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"`+poison+`"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"fine again"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	refusals(t, p, p.ReadBarrier(), 0)
	h.Eventually("the offering write waits for the lock", h.LockWaits)
	release()
	got := p.Barrier()
	h.Settle()
	if r := h.Run(id); !r.Status.Terminal() {
		t.Fatalf("run %s with nothing left to answer it (%d refusals): want failed %s", r.Status, len(got), run.ReasonMalformedEvent)
	}
	checkFailedMalformed(t, h, id, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "RUN_ERROR"})
	// The refused event and the two behind it.
	checkRefusals(t, refusals(t, p, got, 3), id)
	p.None()
	if q := h.Quality(p.Key); charges(q) != 0 || q.WithdrawnAt != nil {
		t.Errorf("a refused event counted %+v", q)
	}
	if !h.Ready() {
		t.Fatal("the broker stepped down")
	}
}
