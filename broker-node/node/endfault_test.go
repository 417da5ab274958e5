package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A provider's RUN_ERROR is taken into the run's end before the write that
// stores it commits (endWith). When that write fails on the database
// rather than on its data — here the broker's backend is terminated while
// the end's write waits on a lock — the end must not be decided without
// the event stored: the write is retried under its one write key (D13), so
// the run fails with the provider's reason, the RUN_ERROR is the last
// stored event (D9: the caller sees a terminal event), the provider is
// answered with nothing to refuse, and no counter moves.
func TestProviderRunErrorSurvivesAKilledEndWrite(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe7, nil)
	p.Register("echo")
	before := h.Quality(p.Key)
	id, releaseThread := endWriteWaits(t, h, p)
	if killLockWaiters(t, h) == 0 {
		t.Fatal("no backend waited on the thread's row")
	}
	releaseThread()
	checkProviderEnd(t, h, p, id, before)
}

// Past StoreRetryFor the leader steps down with the end unwritten (D13):
// what the lane took in of the provider's round goes with it, the link is
// closed, and the provider, never answered for its RUN_ERROR, resends it
// to the next leader, which ends the run as the provider said.
func TestProviderRunErrorSurvivesAnEndWriteThatStepsDown(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.StoreRetryFor, c.ProviderGrace = 300*time.Millisecond, 30*time.Second })
	p := h.Connect(0xe7, nil)
	p.Register("echo")
	before := h.Quality(p.Key)
	id, releaseThread := endWriteWaits(t, h, p)
	h.Eventually("the leader steps down, closing the link", func() bool {
		killLockWaiters(t, h)
		closed, _ := p.Closed()
		return closed
	})
	releaseThread()
	if r := h.Run(id); r.Status.Terminal() {
		t.Fatalf("run %s %q before the provider resent its end", r.Status, r.FailureReason)
	}
	h.Eventually("the node leads again", h.Ready)
	back := h.Connect(0xe7, nil)
	back.Register("echo")
	// The reports funduq did not answer for, resent as they were.
	back.SendRaw(eventFrame(id, 4, `{"type":"RUN_ERROR","message":"boom","code":"provider_code"}`))
	back.Finish(id)
	checkProviderEnd(t, h, back, id, before)
}

func eventFrame(id string, seq int, ev string) string {
	return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":%s}`, id, seq, ev)
}

// endWriteWaits runs a round to the write that ends it with the provider's
// RUN_ERROR, and returns with that write waiting on the thread's row until
// release. The lane is first held in a write (the run's row locked) while
// RUN_ERROR and the finish arrive, so it reads them together and ends the
// run with them in one write (endWith); only an end touches the thread's
// row.
func endWriteWaits(t *testing.T, h *nodetest.Harness, p *nodetest.Prov) (id string, release func()) {
	t.Helper()
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.SendRaw(eventFrame(id, 1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)))
	p.SendRaw(eventFrame(id, 2, `{"type":"CUSTOM","name":"c","value":1}`))
	refusals(t, p, p.Barrier(), 0) // stored
	releaseRun := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	p.SendRaw(eventFrame(id, 3, `{"type":"CUSTOM","name":"c","value":2}`))
	h.Eventually("the lane waits on the run's row", h.LockWaitsOn("runs"))
	p.SendRaw(eventFrame(id, 4, `{"type":"RUN_ERROR","message":"boom","code":"provider_code"}`))
	p.Finish(id)
	if got := p.ReadBarrier(); len(got) != 0 {
		t.Fatalf("frames before the lane went on: %s", got)
	}
	release = h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, thread)
	releaseRun()
	h.Eventually("the end's write waits on the thread's row", h.LockWaitsOn("threads"))
	return id, release
}

// killLockWaiters terminates the backends waiting on a lock: the
// connection lost mid-write, not the data refused.
func killLockWaiters(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkProviderEnd asserts the run ended as its provider's RUN_ERROR says,
// with that event last in its stream, the provider refused nothing, and no
// counter moved (an agent's own RUN_ERROR counts nothing, D6).
func checkProviderEnd(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, id string, before any) {
	t.Helper()
	var r = h.Run(id)
	h.Eventually("the run ends", func() bool { r = h.Run(id); return r.Status.Terminal() })
	if r.Status != run.Failed || r.FailureReason != "provider_code" {
		t.Errorf("run %s %q, want failed with the provider's reason provider_code", r.Status, r.FailureReason)
	}
	evs := h.Events(id)
	if len(evs) != 4 {
		t.Errorf("stored %d events, want 4 (RUN_STARTED, CUSTOM, CUSTOM, RUN_ERROR): %v", len(evs), evs)
	}
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || last["code"] != "provider_code" {
		t.Errorf("the caller's stream ends on %v, want the provider's RUN_ERROR", last)
	}
	refusals(t, p, p.Barrier(), 0) // the reports taken, none refused
	if after := h.Quality(p.Key); after != before {
		t.Errorf("counters %+v -> %+v, want none moved", before, after)
	}
}
