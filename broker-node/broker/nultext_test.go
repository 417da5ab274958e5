package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider's report PostgreSQL cannot hold — here a pause whose
// interrupt id holds a NUL escape, which runs.interrupt (jsonb) refuses —
// fails its run malformed_event with a refusal the provider sees. Before,
// the lane retried the end's write until StoreRetryFor passed and the
// broker stepped down: one provider's event cost every run its leader.
//
// The same for what else runs.interrupt (jsonb) refuses: an escaped
// surrogate without its pair, and a number beyond numeric's range. Before,
// the end's write was refused, the lane let the run go, and the record
// said running with nobody holding it.
func TestLaneNULTextInAProvidersReport(t *testing.T) {
	for _, c := range []struct{ name, interrupt, refusal string }{
		{"NUL", `{"id":"int\u0000","reason":"confirm"}`, "NUL"},
		{"lone surrogate", `{"id":"int\ud800","reason":"confirm"}`, "surrogate"},
		{"number out of range", `{"id":"int","reason":"confirm","payload":{"n":1e999999}}`, "number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Settings{})
			p := h.connect(0xe1, nil)
			p.register("echo")
			id, thread := h.door(p.key, "echo", "hi")
			p.offer()
			p.accept(id)
			p.event(id, started(id, thread))
			p.event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[%s]}}`, thread, id, c.interrupt))
			p.finish(id)
			r := h.waitStatus(id, run.Failed)
			if r.FailureReason != string(run.ReasonMalformedEvent) {
				t.Fatalf("reason %q", r.FailureReason)
			}
			checkEvents(t, h, id, []string{"RUN_STARTED", "RUN_ERROR"})
			if f := p.expect(wire.TypeError); !strings.Contains(string(f), c.refusal) {
				t.Fatalf("refusal %s, want it to name the %s", f, c.refusal)
			}
			if ok, _ := h.b.Leading(); !ok {
				t.Fatal("the broker stepped down")
			}
		})
	}
}

// A registration PostgreSQL cannot hold (agents.metadata is jsonb, which
// refuses \u0000; a description is text, which refuses NUL) is refused to
// the provider at once, and the broker keeps leading: a write that can
// never land is not retried until the leader steps down.
func TestRegisterWithNULTextIsRefused(t *testing.T) {
	h := newHarness(t, Settings{})
	for _, reg := range []wire.Registration{
		{Name: "echo", Metadata: json.RawMessage(`{"k":"\u0000"}`)},
		{Name: "echo", Description: "a\x00b"},
	} {
		p := h.connect(0xe1, nil)
		err := h.b.Register(context.Background(), p, []wire.Registration{reg}, "", func([]string) {})
		var re *RegisterError
		if !errors.As(err, &re) || !strings.Contains(re.Msg, "NUL") {
			t.Fatalf("register %+v: %v, want a RegisterError naming the NUL", reg, err)
		}
		if ok, _ := h.b.Leading(); !ok {
			t.Fatal("the broker stepped down")
		}
	}
}

// A write PostgreSQL refuses for its data (class 22, 23) is returned at
// once to the caller to judge, and the broker keeps leading; only the
// database being away is retried until StoreRetryFor.
func TestWriteReturnsADataRefusalAtOnce(t *testing.T) {
	h := newHarness(t, Settings{})
	for _, code := range []string{"22P05", "22021", "23514"} {
		calls := 0
		err := h.b.write(context.Background(), "refused", func() error { calls++; return &pgconn.PgError{Code: code} })
		if calls != 1 || err == nil {
			t.Fatalf("%s: %d calls, err %v", code, calls, err)
		}
		if ok, _ := h.b.Leading(); !ok {
			t.Fatalf("%s: the broker stepped down", code)
		}
	}
}

// An end PostgreSQL refuses for its data — whatever slipped past the
// event checks — fails its run malformed_event with a RUN_ERROR and a
// refusal the provider sees, counting nothing, and the broker keeps
// leading. Before, the lane logged the refusal and let the run go: the
// record said running with nobody holding it, and its caller waited.
func TestRefusedEndFailsItsRun(t *testing.T) {
	h := newHarness(t, Settings{})
	h.st.InjectFaults(&store.Faults{Conclude: func(c store.Conclusion) error {
		if c.Move.To == run.Completed {
			return &pgconn.PgError{Code: "22P02", Message: "injected: a value PostgreSQL cannot hold"}
		}
		return nil
	}})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	p.accept(id)
	p.event(id, started(id, thread))
	p.event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.finish(id)
	r := h.waitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonMalformedEvent) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	if evs := h.events(id); len(evs) == 0 || evs[len(evs)-1] != "RUN_ERROR" || slices.Contains(evs, "RUN_FINISHED") {
		t.Fatalf("events %v: want a RUN_ERROR last and no RUN_FINISHED stored", evs)
	}
	if f := p.expect(wire.TypeError); !strings.Contains(string(f), id) || !strings.Contains(string(f), "could not store") {
		t.Fatalf("refusal %s", f)
	}
	if ok, _ := h.b.Leading(); !ok {
		t.Fatal("the broker stepped down")
	}
	if q := h.quality(p.key); q != (store.Quality{ProviderKey: p.key}) {
		t.Fatalf("counted: %+v", q)
	}
}
