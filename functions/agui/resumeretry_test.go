package agui_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// An answer retried with the same Idempotency-Key — while the reopened run
// is live, and after it paused anew on an interrupt of the same id —
// streams the round it opened: no new run, no second offer, and never a
// second answer to the provider (design.md D13). Before, the retry was
// looked up by the key alone and found nothing: live, it got the thread
// snapshot; after the new pause, it answered the new question again.
func TestRetriedResumeWithIdempotencyKey(t *testing.T) {
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	key := map[string]string{agui.IdempotencyHeader: "answer-1"}
	body := resumeBody(*f.ThreadID, "ans-1", `[{"interruptId":"int1","status":"resolved"}]`)
	s := openStream(t, "POST", url, body, key)
	if f2 := p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("offered %s", f2.RunID)
	}
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	h.WaitStatus(f.RunID, run.Running)
	runs := runCount(t, h)

	// Retried while live: the same run's stream, not a snapshot.
	live := openStream(t, "POST", url, body, key)
	// The resumed round asks again, under the same interrupt id.
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"again"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	first := idsOf(s.rest())
	h.WaitStatus(f.RunID, run.InputRequired)
	if got := idsOf(live.rest()); !slices.Equal(got, first) {
		t.Fatalf("live retry streamed %v, the answer %v", got, first)
	}
	// Retried after it paused anew: the answered round again, the new
	// question left for a new answer.
	again := openStream(t, "POST", url, body, key)
	if got := idsOf(again.rest()); !slices.Equal(got, first) {
		t.Fatalf("retry after streamed %v, the answer %v", got, first)
	}
	p.None() // no second answer reached the provider
	if r := h.Run(f.RunID); runCount(t, h) != runs || r.Status != run.InputRequired || !strings.Contains(string(r.Interrupt), "again") {
		t.Fatalf("a retried answer wrote: runs %d→%d, %s %s", runs, runCount(t, h), r.Status, r.Interrupt)
	}
	if code, _, got := jsonCall(t, "POST", url, resumeBody(*f.ThreadID, "ans-1", `[{"interruptId":"int1","status":"cancelled"}]`), key); code != 422 {
		t.Fatalf("key reused for another answer: %d %v", code, got)
	}
}
