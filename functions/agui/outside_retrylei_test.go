package agui_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// A retried POST carrying Last-Event-ID — what a fetch-based SSE client
// sends when it retries the request whose stream dropped — gets the run's
// later events once (D9), opened by a RUN_STARTED, not the events it
// already has again. A request that makes a new run streams it whole
// whatever Last-Event-ID says: its ids name no event of that run.
func TestOutsideRetriedPostResumesAfterLastEventID(t *testing.T) {
	h, p, url := echoDoor(t)
	body := input("t", "r1", "")
	s := openStream(t, "POST", url, body, map[string]string{agui.IdempotencyHeader: "retry-1"})
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"one"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	if ids, _ := storedIDs(t, s.rest()); !slices.Equal(ids, seqRange(1, 5)) {
		t.Fatalf("first stream ids %v", ids)
	}
	h.WaitStatus(f.RunID, run.Completed)

	for _, after := range []int{0, 2, 5} {
		hdr := map[string]string{agui.IdempotencyHeader: "retry-1", agui.LastEventIDHeader: fmt.Sprint(after)}
		got, started := storedIDs(t, openStream(t, "POST", url, body, hdr).rest())
		if want := seqRange(after+1, 5); !slices.Equal(got, want) || !started {
			t.Fatalf("retry after %d: ids %v (opened by RUN_STARTED: %v), want %v", after, got, started, want)
		}
	}

	// A new run (another key) streams from its start.
	s2 := openStream(t, "POST", url, body, map[string]string{agui.IdempotencyHeader: "retry-2", agui.LastEventIDHeader: "3"})
	f2 := p.Offer()
	p.Accept(f2.RunID)
	p.Event(f2.RunID, runStartedFor(f2))
	p.Event(f2.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f2.ThreadID, f2.RunID))
	p.Finish(f2.RunID)
	if ids, _ := storedIDs(t, s2.rest()); !slices.Equal(ids, seqRange(1, 2)) {
		t.Fatalf("a new run's stream ids %v", ids)
	}
}
