package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
)

func pauseRound(p *fakeLink, id, thread string) {
	p.event(id, started(id, thread))
	p.event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, id))
	p.finish(id)
}

// doorWithPayload inserts a run as h.door does, but notifies the broker as
// the listener does for a door's queued notice that carries the row
// (store.QueuedPayload): the lane is born without the row's queued_at.
func doorWithPayload(h *harness, key, agent string) (runID, threadID string) {
	h.t.Helper()
	runID, threadID = run.NewRunID(), run.NewThreadID()
	in, err := runinput.Build(runinput.Request{ThreadID: threadID, RunID: runID,
		Messages: []json.RawMessage{json.RawMessage(`{"id":"c1","role":"user","content":"hi"}`)}})
	if err != nil {
		h.t.Fatal(err)
	}
	nr := store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: agent, RunInput: in.Bytes,
		CreateThread: &store.NewThread{}}
	if _, _, err := h.st.CreateRun(context.Background(), nr); err != nil {
		h.t.Fatal(err)
	}
	id, row, err := store.ParseQueuedPayload(store.QueuedPayload(nr))
	if err != nil || row == nil || id != runID {
		h.t.Fatalf("payload %v %v", row, err)
	}
	h.b.Notify(context.Background(), intake.Notice{Kind: intake.Queued, RunID: id, Run: row})
	return runID, threadID
}

// A read of a run as queued can arrive after its lane has already run the
// round: a catch-up page read before the claim, or a door's notice
// delivered late. Such a read opens no lane and offers nothing — for a
// round that paused (input-required) as for one that ended — while the
// next round of the same run (an answer reopens the same run id) is
// taken as usual. Found as a flaky functions/agui TestAuthorityMatrix: the
// stale round's offer went out before its offering write was refused and
// withdrawn, and the provider's next "offer" was that stale frame.
func TestLaneStaleReadOfASettledRound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload bool // the lane is born from a notice carrying the row
		finish  func(p *fakeLink, id, thread string)
		want    run.Status
	}{
		{"paused", false, pauseRound, run.InputRequired},
		{"paused, born from a notice's row", true, pauseRound, run.InputRequired},
		{"completed", false, func(p *fakeLink, id, thread string) { p.complete(id, thread) }, run.Completed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Settings{})
			p := h.connect(0xe1, nil)
			p.register("echo")
			var id, thread string
			if tc.payload {
				id, thread = doorWithPayload(h, p.key, "echo")
			} else {
				id, thread = h.door(p.key, "echo", "hi")
			}
			queuedRow := h.run(id) // as a catch-up page read it, before the offer
			if queuedRow.Status != run.Queued && queuedRow.Status != run.Offering {
				t.Fatalf("read as %s", queuedRow.Status)
			}
			queuedRow.Status = run.Queued
			if got := p.offer(); got != id {
				t.Fatalf("offered %s", got)
			}
			p.accept(id)
			tc.finish(p, id, thread)
			h.waitStatus(id, tc.want)
			h.settle()

			// The stale reads, by both routes.
			noticeRow := queuedRow
			noticeRow.QueuedAt = time.Time{} // a notice's row carries no queued_at
			h.b.Notify(context.Background(), intake.Notice{Kind: intake.Queued, RunID: id, Run: &noticeRow})
			h.b.take(queuedRow, false)
			p.none()
			if got := h.run(id).Status; got != tc.want {
				t.Fatalf("the stale read moved the run to %s", got)
			}
			if tc.want != run.InputRequired {
				return
			}
			// The answer's round is taken and offered.
			if _, err := h.st.ReopenRun(context.Background(), store.Reopen{RunID: id}); err != nil {
				t.Fatal(err)
			}
			h.b.Notify(context.Background(), intake.Notice{Kind: intake.Resumed, RunID: id})
			if got := p.offer(); got != id {
				t.Fatalf("the answer's round offered %s", got)
			}
		})
	}
}
