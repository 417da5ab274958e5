package broker

import (
	"context"
	"testing"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// A cancel asked while a run's first round ran, whose notice reaches the
// broker only after the round paused and the caller's answer reopened the
// run (the reopen clears the request, store.ReopenRun), cancels nothing:
// the answer's round runs to its end. Found as a flaky functions/a2a
// TestCancelRacingThePause: the late notice cancelled the answer's round.
func TestLateCancelNoticeSparesTheAnswersRound(t *testing.T) {
	h := newHarness(t, Settings{})
	p := h.connect(0xe2, nil)
	p.register("echo")
	id, thread := h.door(p.key, "echo", "hi")
	p.takes(id)
	if _, err := h.st.RequestCancel(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	// Its notice is late: the round pauses first, and is answered.
	pauseRound(p, id, thread)
	h.waitStatus(id, run.InputRequired)
	if _, err := h.st.ReopenRun(context.Background(), store.Reopen{RunID: id}); err != nil {
		t.Fatal(err)
	}
	h.b.Notify(context.Background(), intake.Notice{Kind: intake.Resumed, RunID: id})
	p.takes(id)

	h.b.Notify(context.Background(), intake.Notice{Kind: intake.Cancel, RunID: id})
	p.none()
	if got := h.run(id).Status; got != run.Running {
		t.Fatalf("the late cancel notice moved the answer's round to %s", got)
	}
	p.complete(id, thread)
	h.waitStatus(id, run.Completed)
}
