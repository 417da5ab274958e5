package agui_test

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// Reproduction (outside test): an answer sent with an Idempotency-Key was
// recorded only under its runId, and a retry carrying the key is looked up
// by the key alone. So the retry found nothing: while the reopened run was
// live it got the thread snapshot instead of its stream, and once the
// resumed round paused again on an interrupt of the same id it answered
// the new question with the old answer — a second resume the provider was
// offered.
// An answer retried with the same Idempotency-Key — while the reopened run
// is live, and after it paused anew on an interrupt of the same id —
// streams the round it opened: no new run, no second offer, and never a
// second answer to the provider (design.md D13).
func TestRetriedResumeWithIdempotencyKey(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
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
	resp, cancel := do(t, "POST", url, body, key)
	defer cancel()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the answer retried while its run is live: %d %s %s", resp.StatusCode, ct, b)
	}
	live := &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(live.close)
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
	resp, cancel = do(t, "POST", url, body, key)
	defer cancel()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the answer retried after its round: %d %s %s", resp.StatusCode, ct, b)
	}
	again := &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(again.close)
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
