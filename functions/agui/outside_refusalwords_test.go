package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/core/run"
)

// A provider refuses a run in funduq's own words (a refusal's reason is
// the provider's to choose): the caller's stream ends on a RUN_ERROR whose
// code and message are those words, and nothing funduq adds tells the
// caller funduq restarted — the seeds: funduq invents no reason of its
// own, the annotation is the provider's.
func TestOutsideRefusalInFunduqsWords(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	restart := string(run.ReasonOrphanedByRestart)
	p.Refuse(f.RunID, restart)
	evs := events(s.rest())
	last := evs[len(evs)-1].event(t)
	if last["type"] != "RUN_ERROR" || last["code"] != restart || last["message"] != restart {
		t.Fatalf("the caller's last event %v, want RUN_ERROR with code and message %q", last, restart)
	}
	if r := h.WaitStatus(f.RunID, run.Failed); r.FailureReason != restart {
		t.Fatalf("failure reason %q", r.FailureReason)
	}
}
