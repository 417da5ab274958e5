package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A terminal event under a seq the round already stored for another event
// is refused (D7: a seq names one event) and not stored. Riding with the
// run's finish, it must not decide the run's end either: the end is what
// the stored stream says (D15), so the run fails as a stream that ended
// without finishing, with funduq's RUN_ERROR for the caller. Read into the
// end before the store refused it, it made the run failed (or completed)
// with no terminal event stored: the caller's stream ended without it.
func TestTerminalEventUnderATakenSeqDoesNotEndTheRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	frame := func(id string, seq int, ev string) string {
		return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":%s}`, id, seq, ev)
	}
	for _, terminal := range []string{
		`{"type":"RUN_ERROR","message":"boom","code":"provider_code"}`,
		`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`,
	} {
		id, thread := h.Door(p.Key, "echo", "", "hi")
		p.Offer()
		p.Accept(id)
		p.SendRaw(frame(id, 1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)))
		h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })
		h.Settle()
		if strings.Contains(terminal, "%q") {
			terminal = fmt.Sprintf(terminal, thread, id)
		}
		// The lane is held in a write (the run's row locked) while the
		// terminal event and the finish arrive, so it reads them together.
		release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
		p.SendRaw(frame(id, 2, `{"type":"CUSTOM","name":"c","value":1}`))
		h.Eventually("the lane waits on the row", h.LockWaits)
		p.SendRaw(frame(id, 1, terminal)) // another event under seq 1
		p.Finish(id)
		if got := p.ReadBarrier(); len(got) != 0 {
			t.Fatalf("frames before the lane went on: %s", got)
		}
		release()
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if e.RunID != id || !strings.HasPrefix(e.Message, "event refused") {
			t.Fatalf("error %+v, want the event refused naming run %s", e, id)
		}
		var r = h.Run(id)
		h.Eventually("the run ends", func() bool { r = h.Run(id); return r.Status.Terminal() })
		if r.Status != run.Failed || r.FailureReason != string(run.ReasonStreamEndedWithoutFinishing) {
			t.Errorf("%s: %s %q, want failed %s: the refused event decided the end", terminal, r.Status, r.FailureReason, run.ReasonStreamEndedWithoutFinishing)
		}
		evs := h.Events(id)
		if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || last["code"] != string(run.ReasonStreamEndedWithoutFinishing) {
			t.Errorf("%s: the caller's stream ends on %v, want funduq's RUN_ERROR", terminal, last)
		}
		p.None()
	}
}
