package a2a_test

import (
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Reproduction (outside test): an answer sent with an Idempotency-Key was
// recorded only under its messageId, and a retry carrying the key is
// looked up by the key alone. Once the answered round paused again on an
// interrupt of the same id, the retried answer reopened the task a second
// time: the provider was offered the old answer to the new question
// (design.md D13).
func TestOutsideAnswerRetriedWithIdempotencyKey(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("odd")
	c := newClient(t, startDoor(t, h, nil), p.Key, "odd", "")
	ask := func(r, th string) []string {
		return []string{runStarted(th, r),
			fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"a1","reason":"confirm"}]}}`, th, r)}
	}
	got := playNext(p, ask)
	first := c.send(c.message("m1", "start", nil), nil)
	id := recv(t, got, "the first round").RunID
	if first["id"] != id {
		t.Fatalf("first pause: %v", first)
	}
	// The answer, with a key; its round asks again under the same id.
	got = playNext(p, ask)
	body := c.body("message/stream", map[string]any{"message": c.message("m2", "yes", map[string]any{"taskId": id})})
	key := map[string]string{a2a.IdempotencyHeader: "answer-1"}
	c.stream(body, key).rest()
	recv(t, got, "the answered round")
	h.WaitStatus(id, run.InputRequired)
	runs := h.Run(id)
	// The retry: the task it answered, settled as it stands (design.md
	// §The doors: a retried stream opens at its last event), nothing offered.
	again := c.stream(body, key)
	p.None()
	items := normItems(t, "", again.rest())
	if last := items[len(items)-1]; stateOf(last.obj) != "input-required" || last.obj["final"] != true {
		t.Fatalf("retry's stream ended %v", last.obj)
	}
	if r := h.Run(id); r.Status != run.InputRequired || r.LastSeq != runs.LastSeq {
		t.Fatalf("the retry moved the task: %s seq %d→%d", r.Status, runs.LastSeq, r.LastSeq)
	}
}

// The same answer retried while its round still runs: the task it
// reopened, not a new task made of the repeated message.
func TestOutsideAnswerRetriedWhileItsRoundRuns(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("odd")
	c := newClient(t, startDoor(t, h, nil), p.Key, "odd", "")
	got := playNext(p, func(r, th string) []string {
		return []string{runStarted(th, r),
			fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"a1","reason":"confirm"}]}}`, th, r)}
	})
	c.send(c.message("m1", "start", nil), nil)
	id := recv(t, got, "the first round").RunID
	h.WaitStatus(id, run.InputRequired)
	body := c.body("message/stream", map[string]any{"message": c.message("m2", "yes", map[string]any{"taskId": id})})
	key := map[string]string{a2a.IdempotencyHeader: "answer-1"}
	s := c.stream(body, key)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	h.WaitStatus(id, run.Running)
	var before int
	_ = h.Store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM runs`).Scan(&before)
	again := c.stream(body, key)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	items := normItems(t, "", again.rest())
	if last := items[len(items)-1]; last.obj["taskId"] != id || stateOf(last.obj) != "completed" {
		t.Fatalf("retry's stream ended %v, want task %s completed", last.obj, id)
	}
	var after int
	_ = h.Store.Pool().QueryRow(t.Context(), `SELECT count(*) FROM runs`).Scan(&after)
	p.None()
	if after != before {
		t.Fatalf("the retry made a run: %d→%d", before, after)
	}
}
