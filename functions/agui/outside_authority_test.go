package agui_test

import (
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
)

// A stranger that holds the id of a bound thread's paused run and sends
// an answer to it through another agent's endpoint learns nothing: exactly
// an unknown thread's answer, as through the thread's own agent
// (TestAuthorityMatrix; design.md D16).
func TestOutsideStrangerAnswerThroughAnotherAgent(t *testing.T) {
	a := newAuthz(t)
	f := a.pausedBound()
	const unknownThread = "thread_000000000000000000000000"
	elseURL := a.srv + "/agui/" + a.other.Key + "/else"
	for _, who := range []struct {
		name   string
		signer *identity.Signer
	}{{"anonymous", nil}, {"chain of its own", a.stray}} {
		t.Run(who.name, func(t *testing.T) {
			send := func(thread string) (int, map[string]any) {
				bag := ""
				if who.signer != nil {
					bag = `"actorChain":` + mustJSON(chainOf(t, who.signer))
				}
				body := fmt.Sprintf(`{"threadId":%q,"runId":"ans","messages":[%s],"tools":[],"context":[],"forwardedProps":{%s},%s}`,
					thread, toolTC2, bag, resumeInt1)
				var hdr map[string]string
				if who.signer != nil {
					hdr = presenterHdr(who.signer, body)
				}
				code, _, got := jsonCall(t, "POST", elseURL, body, hdr)
				return code, got
			}
			code, got := send(*f.ThreadID)
			ucode, ugot := send(unknownThread)
			if code != ucode || replaceID(mustJSON(got), *f.ThreadID, unknownThread) != mustJSON(ugot) {
				t.Fatalf("a stranger's answer to the bound thread got %d %v; an unknown thread gets %d %v", code, got, ucode, ugot)
			}
			if st := a.h.Run(f.RunID).Status; st != run.InputRequired {
				t.Fatalf("the pause is %s", st)
			}
		})
	}
}
