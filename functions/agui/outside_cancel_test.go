package agui_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// One cancel request reaches the provider as one cancel frame. The
// request arrives while the run's lane is busy (its event write waits on
// a lock), so the door's notification and the broker's safety poll
// (intake catch-up) both find it before the lane has taken it in. The
// provider must get one cancel frame: a second one is a request nobody
// made, and it sits on the link ahead of whatever comes next (under load
// TestCancelledRunThatPausesIsAnswerable read it where the answered
// round's offer belongs).
func TestOutsideOneCancelFramePerRequest(t *testing.T) {
	h, p, url := echoDoor(t)
	a2aSrv := startA2A(t, h)
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	h.WaitStatus(f.RunID, run.Running)

	release := h.Hold(`SELECT 1 FROM broker_leader WHERE id = 1 FOR UPDATE`) // every fenced broker write waits
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"busy"}`)
	h.Eventually("the lane waits in its write", h.LockWaits)
	if res, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": f.RunID}); rpcErr != nil || res == nil {
		t.Fatalf("cancel: %v %v", res, rpcErr)
	}
	// A safety poll read the cancel requests after this one was recorded.
	var recorded time.Time
	if err := h.DB().QueryRow(context.Background(), `SELECT now()`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	h.Eventually("a catch-up read the cancel request", func() bool {
		var n int
		err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '%cancel_requested_at IS NOT NULL%'
			AND query NOT LIKE '%pg_stat_activity%' AND query_start > $1`, recorded).Scan(&n)
		return err == nil && n > 0
	})
	release()

	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	p.None() // one request, one frame
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "TEXT_MESSAGE_CHUNK", "RUN_FINISHED"}) {
		t.Fatalf("the caller saw %v", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
}
