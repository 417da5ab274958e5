package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// A cancel racing the provider's end: the door recorded the request (the
// caller was answered "working", cancel requested) while the run was
// running, and the provider's stream ends without RUN_FINISHED — its
// RUN_ERROR, or nothing — before the lane has read the request's notice.
// The record held the request before the end, so the funnel's third rule
// applies (design.md §The status machine): the run is cancelled, as it is
// when the notice comes first, never failed
// provider_stream_ended_without_finishing with a RUN_ERROR funduq made up.
// The request is written as RequestCancel writes it, its NOTIFY not yet
// read (a notice the intake reads late, design.md §The status machine).
func TestCancelRecordedBeforeTheEndOutranksAFailure(t *testing.T) {
	for _, withError := range []bool{false, true} {
		t.Run(fmt.Sprintf("RUN_ERROR %v", withError), func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			id, thread := h.Door(p.Key, "echo", "", "one")
			p.Offer()
			p.Accept(id)
			p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
			h.WaitStatus(id, run.Running)
			if _, err := h.Store.Pool().Exec(context.Background(), `UPDATE runs SET cancel_requested_by = '',
				cancel_requested_at = now() WHERE run_id = $1 AND status = 'running'`, id); err != nil {
				t.Fatal(err)
			}
			if withError {
				p.Event(id, `{"type":"RUN_ERROR","message":"stopped"}`)
			}
			p.Finish(id)
			var r store.Run
			h.Eventually("the run ends", func() bool { r = h.Run(id); return r.Status.Terminal() })
			if r.Status != run.Cancelled {
				t.Fatalf("the run ended %s %q, want cancelled: the cancel was recorded before its end", r.Status, r.FailureReason)
			}
			for _, e := range h.Events(id) {
				if e["code"] == string(run.ReasonStreamEndedWithoutFinishing) {
					t.Fatalf("a cancelled run got funduq's RUN_ERROR: %v", h.Events(id))
				}
			}
			if r.FailureReason != "" {
				t.Fatalf("reason %q", r.FailureReason)
			}
			h.Settle()
			if q := h.Quality(p.Key); charges(q) != 0 {
				t.Fatalf("counted %+v", q)
			}
		})
	}
}
