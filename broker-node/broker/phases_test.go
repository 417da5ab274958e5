package broker

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// The lane's other phases alone (issue #19, deliverable 2): intake's
// agent_offline, the unserved and undelivered clocks of the sweep, the
// relay's validation, the finish funnel, cancels outside an offer, and the
// typed refusal of a report the lane does not take (design.md).

// A run arriving while nobody serves its agent fails agent_offline at
// once, with one RUN_ERROR, and is never offered.
func TestLaneAgentOfflineAtIntake(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	p.goodbye()
	id, _ := h.door(p.key, "echo", "hi")
	r := h.waitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, id, []string{"RUN_ERROR"})
	p.none()
}

// The unserved clock: a queued run whose agent lost its provider fails
// no_provider_took_it once the unserved window has passed since it went
// unserved, not before.
func TestLaneUnservedClock(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	busy, _ := h.door(p.key, "echo", "busy")
	p.offer()
	p.accept(busy)
	h.waitStatus(busy, run.Running)
	kept, _ := h.door(p.key, "echo", "kept") // queued behind the full bucket
	h.settle()
	p.goodbye()
	h.waitStatus(busy, run.Failed)
	h.sweepAt(44*time.Second, 1)
	if got := h.run(kept).Status; got != run.Queued {
		t.Fatalf("failed before the window passed: %s", got)
	}
	h.sweepAt(time.Second, 1)
	r := h.waitStatus(kept, run.Failed)
	if r.FailureReason != string(run.ReasonNoProviderTookIt) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, kept, []string{"RUN_ERROR"})
}

// A claimed run not delivered within the window counts undelivered once
// and is left running: the provider may still deliver it.
func TestLaneUndeliveredIsCountedNotSettled(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	p.accept(id)
	h.waitStatus(id, run.Running)
	h.sweepAt(1800*time.Second, 1)
	h.eventually("undelivered counted", func() bool { return h.quality(p.key).Undelivered == 1 })
	h.sweepAt(time.Hour, 1)
	checkQuality(t, h, p.key, store.Quality{Undelivered: 1})
	if got := h.run(id).Status; got != run.Running {
		t.Fatalf("the window settled the run: %s", got)
	}
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
}

// A malformed known event fails the run after what came before it is
// stored; an unknown type is relayed untouched.
func TestLaneMalformedEventFailsTheRun(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, _ := h.door(p.key, "echo", "hi")
	p.offer()
	p.accept(id)
	p.event(id, `{"type":"FUTURE_EVENT","anything":[1,2,3]}`)
	p.event(id, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`) // no delta
	r := h.waitStatus(id, run.Failed)
	if r.FailureReason != string(run.ReasonMalformedEvent) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, id, []string{"FUTURE_EVENT", "RUN_ERROR"})
	checkInFlight(t, h, p.key, 0)
}

// The finish funnel: a stream that ends without RUN_FINISHED fails with
// funduq's RUN_ERROR; an interrupt outcome pauses the run.
func TestLaneFinishFunnel(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	a, _ := h.door(p.key, "echo", "a")
	p.offer()
	p.accept(a)
	p.finish(a)
	r := h.waitStatus(a, run.Failed)
	if r.FailureReason != string(run.ReasonStreamEndedWithoutFinishing) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	checkEvents(t, h, a, []string{"RUN_ERROR"})
	b, thread := h.door(p.key, "echo", "b")
	if got := p.offer(); got != b {
		t.Fatalf("offered %s, want %s", got, b)
	}
	p.accept(b)
	p.event(b, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, b))
	p.finish(b)
	h.waitStatus(b, run.InputRequired)
	checkInFlight(t, h, p.key, 0)
}

// A cancel of a queued run ends it cancelled at once, never offered; a
// cancel of a running run is passed on, and a provider that ignores it and
// finishes is recorded completed.
func TestLaneCancelOutsideAnOffer(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, limit(1))
	p.register("echo")
	busy, thread := h.door(p.key, "echo", "busy")
	p.offer()
	p.accept(busy)
	h.waitStatus(busy, run.Running)
	queued, _ := h.door(p.key, "echo", "queued")
	h.settle()
	h.cancel(queued)
	h.waitStatus(queued, run.Cancelled)
	checkEvents(t, h, queued, []string{})
	p.none()

	h.cancel(busy)
	p.expect(wire.TypeCancel)
	h.waitStatus(busy, run.Cancelling)
	p.complete(busy, thread)
	h.waitStatus(busy, run.Completed)
	checkInFlight(t, h, p.key, 0)
	p.none()
}

// Every report the lane does not take is answered with a typed refusal
// naming the run: an unknown run, an answer after the offer lapsed, a
// stranger's report (told only "unknown run"), an event after the end.
func TestLaneRefusedReportsAreAnswered(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	stranger := h.connect(0xe2, nil)
	stranger.register("other")
	refused := func(l *fakeLink, runID, msg string) {
		t.Helper()
		var e wire.Error
		f := l.expect(wire.TypeError)
		if err := json.Unmarshal(f, &e); err != nil || e.RunID != runID || e.Message != msg {
			t.Fatalf("refusal %s, want %q for %s", f, msg, runID)
		}
	}
	p.accept("run_nosuch")
	refused(p, "run_nosuch", "ack refused: unknown run")
	p.event("run_nosuch", `{"type":"RUN_STARTED","threadId":"t","runId":"run_nosuch"}`)
	refused(p, "run_nosuch", "event refused: unknown run")
	p.finish("run_nosuch")
	refused(p, "run_nosuch", "finish refused: unknown run")

	id, thread := h.door(p.key, "echo", "hi")
	p.offer()
	h.waitStatus(id, run.Offering)
	h.advance(5 * time.Second) // the offer lapses
	h.waitStatus(id, run.Queued)
	p.decline(id)
	refused(p, id, "ack refused: no offer out for this run")
	p.accept(id) // a late accept claims it
	h.waitStatus(id, run.Running)
	stranger.event(id, started(id, thread))
	refused(stranger, id, "event refused: unknown run")
	p.event(id, started(id, thread))
	p.event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	h.eventually("two events stored", func() bool { return len(h.events(id)) == 2 })
	p.event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m9","role":"assistant"}`)
	refused(p, id, "event refused: the run already reported its end")
	p.finish(id)
	h.waitStatus(id, run.Completed)
	checkEvents(t, h, id, []string{"RUN_STARTED", "RUN_FINISHED"})
	p.none()
	stranger.none()
}

// The thread's queue and interjections: a thread's second turn is offered
// only once its first is claimed; an interjection addressing the thread's
// running run goes straight to the link holding it, past a turn waiting at
// the head, when the agent takes interjections — otherwise it waits its
// turn like any run.
func TestLaneThreadQueueAndInterjection(t *testing.T) {
	for _, takes := range []bool{true, false} {
		t.Run(fmt.Sprint("takes=", takes), func(t *testing.T) {
			h := newHarness(t, Settings{})
			p := h.connect(0xe1, nil)
			p.registerAs(wire.Registration{Name: "echo", TakesInterjections: takes})
			first, thread := h.door(p.key, "echo", "one")
			second := h.doorOn(p.key, "echo", thread, "", "two", false)
			if got := p.offer(); got != first {
				t.Fatalf("offered %s, want the thread's first turn %s", got, first)
			}
			p.none() // the second waits for the first's claim
			p.accept(first)
			h.waitStatus(first, run.Running)
			if got := p.offer(); got != second {
				t.Fatalf("offered %s, want %s", got, second)
			}
			p.decline(second) // it waits at the head of the thread
			h.waitStatus(second, run.Queued)
			inter := h.doorOn(p.key, "echo", thread, first, "also this", false)
			if !takes {
				h.eventually("the interjection is taken", func() bool { _, ok := h.b.Snapshot().Lanes[inter]; return ok })
				p.none()
				return
			}
			var f wire.RunFrame
			if err := json.Unmarshal(p.expect(wire.TypeRun), &f); err != nil {
				t.Fatal(err)
			}
			if f.RunID != inter {
				t.Fatalf("offered %s, want the interjection %s", f.RunID, inter)
			}
			if addressedRunID(f.RunInput) != first {
				t.Fatalf("the provider was not told what it addresses: %s", f.RunInput)
			}
		})
	}
}

// addressedRunID reads forwardedProps.funduq.addressedRunId from a run
// input: what the provider is told the run addresses.
func addressedRunID(input json.RawMessage) string {
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				AddressedRunID string `json:"addressedRunId"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	return in.ForwardedProps.Funduq.AddressedRunID
}

// A verdict that fails a waiting run (agent_offline), pushed just before
// the lane went on — the sweep read the agent unserved a moment before its
// provider registered, and the lane offered the run first — fails nothing:
// read behind the offer, it finds the run claimed and served, and the
// provider's run completes.
func TestLaneStaleVerdictFailsNoClaimedRun(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe1, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	h.b.mu.Lock()
	h.b.lanes[id].q.push(failCmd{run.ReasonAgentOffline})
	h.b.mu.Unlock()
	p.accept(id)
	p.complete(id, thread)
	r := h.waitStatus(id, run.Completed)
	if r.FailureReason != "" {
		t.Fatalf("reason %q", r.FailureReason)
	}
}
