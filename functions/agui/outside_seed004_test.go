package agui_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Seed 004, read against raw providers from the AG-UI door.

// "A run recorded failed that never emitted its own RUN_ERROR gets one
// synthesized, persisted and relayed … including runs the broker no longer
// tracks when the verdict lands (… an orphan reaped at startup)". A
// caller streaming a run when its leader goes away: nobody re-adopts it
// within provider_grace, and the caller's open stream — fed now by the
// next leader — ends on funduq's RUN_ERROR orphaned_by_funduq_restart,
// not in silence.
func TestOutsideOrphanedRunEndsItsOpenStreamWithARunError(t *testing.T) {
	grace := func(c *config.Broker) { c.ProviderGrace = 30 * time.Second }
	a := nodetest.Start(t, grace)
	b := a.Peer("node-b")
	p, srv := echoServed(t, a)
	s, f := takenRun(t, p, srv)
	p.Event(f.RunID, runStartedFor(f))
	if first, ok := s.nextEvent(); !ok || first.event(t)["type"] != "RUN_STARTED" {
		t.Fatalf("stream opened with %+v", first)
	}
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	b.Advance(b.Cfg.ProviderGrace + time.Second)
	r := b.WaitStatus(f.RunID, run.Failed)
	if r.FailureReason != string(run.ReasonOrphanedByRestart) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	rest := events(s.rest())
	if len(rest) != 1 {
		t.Fatalf("stream went on with %v, want funduq's RUN_ERROR alone", rest)
	}
	if ev := rest[0].event(t); ev["type"] != "RUN_ERROR" || ev["code"] != string(run.ReasonOrphanedByRestart) {
		t.Fatalf("stream ended on %v", ev)
	}
}

// "funduq keeps relaying whatever the run emits" after a cancel, and the
// funnel decides: a provider that goes on and finishes gives the AG-UI
// caller its whole answer ending in RUN_FINISHED (completed); one that
// stops with its own RUN_ERROR gives the caller that RUN_ERROR once and
// nothing of funduq's (cancelled: AG-UI has no cancelled event, and the
// provider's own error is left alone).
func TestOutsideCancelledRunsOnTheAGUIStream(t *testing.T) {
	for _, tc := range []struct {
		name, last string
		want       run.Status
	}{
		{"ignores", `{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, run.Completed},
		{"own error", `{"type":"RUN_ERROR","message":"stopped as asked","code":"stopped"}`, run.Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p, srv := echoServed(t, h)
			s, f := takenRun(t, p, srv)
			p.Event(f.RunID, runStartedFor(f))
			if _, err := h.Store.RequestCancel(t.Context(), f.RunID, ""); err != nil {
				t.Fatal(err)
			}
			p.Expect(wire.TypeCancel, nil)
			h.WaitStatus(f.RunID, run.Cancelling)
			// "cancelling is an active status": the thread shows it as
			// its active run, not as settled.
			code, _, snap := jsonCall(t, "GET", srv.URL+"/threads/"+*f.ThreadID, "", nil)
			if ar, _ := snap["active_run"].(map[string]any); code != 200 || ar["run_id"] != f.RunID || ar["status"] != string(run.Cancelling) {
				t.Fatalf("snapshot %d %v", code, snap)
			}
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m-after","role":"assistant"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-after","delta":"after the cancel"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m-after"}`)
			last := tc.last
			if tc.want == run.Completed {
				last = fmt.Sprintf(last, *f.ThreadID, f.RunID)
			}
			p.Event(f.RunID, last)
			p.Finish(f.RunID)
			got := typesOf(t, events(s.rest()))
			want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"}
			if tc.want == run.Completed {
				want = append(want, "RUN_FINISHED")
			} else {
				want = append(want, "RUN_ERROR")
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("stream %v, want %v", got, want)
			}
			h.WaitStatus(f.RunID, tc.want)
		})
	}
}

// "So the AG-UI door has no cancel entry point … funduq does not invent
// one." Whatever a client guesses at — a cancel path beside the run's
// events, a DELETE of the run — is a route the door does not have (404 or
// 405 in the error envelope), and the running run and its provider hear
// nothing of it.
func TestOutsideAGUIHasNoCancelEntryPoint(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, srv := echoServed(t, h)
	s, f := takenRun(t, p, srv)
	h.WaitStatus(f.RunID, run.Running)
	for _, g := range []struct{ method, path string }{
		{"POST", "/runs/" + f.RunID + "/cancel"},
		{"DELETE", "/runs/" + f.RunID},
		{"DELETE", "/runs/" + f.RunID + "/events"},
		{"POST", "/agui/" + p.Key + "/echo/cancel"},
	} {
		code, _, body := jsonCall(t, g.method, srv.URL+g.path, `{}`, nil)
		if code != 404 && code != 405 || body["error"] == nil {
			t.Fatalf("%s %s: %d %v", g.method, g.path, code, body)
		}
	}
	p.None()
	if st := h.Run(f.RunID).Status; st != run.Running {
		t.Fatalf("status %s", st)
	}
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
	s.close()
}
