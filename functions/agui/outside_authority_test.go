package agui_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
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

// Caller B and an anonymous stranger on caller A's bound thread, holding
// every id A used: a retry of A's turn (A's runId and Idempotency-Key)
// or a turn of their own is refused without A's run, message or status
// (design.md D16 keeps 403 for writes), nothing is written, and a resumed
// read of A's run at any Last-Event-ID is exactly an unknown run's.
func TestOutsideStrangersOnABoundThread(t *testing.T) {
	a := newAuthz(t)
	url := a.srv + "/agui/" + a.p.Key + "/echo"
	idem := map[string]string{agui.IdempotencyHeader: "a-key"}
	body := boundBody("t-new", "ra", chainOf(t, a.head), "")
	hdr := presenterHdr(a.head, body)
	hdr[agui.IdempotencyHeader] = "a-key"
	s := openStream(t, "POST", url, body, hdr)
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	a.h.WaitStatus(f.RunID, run.Completed)
	thread := *f.ThreadID
	runs := runCount(a.t, a.h)

	for _, who := range []struct {
		name   string
		signer *identity.Signer
	}{{"caller B", a.stray}, {"anonymous", nil}} {
		t.Run(who.name, func(t *testing.T) {
			for _, runID := range []string{"ra", "rb"} {
				var b string
				hd := map[string]string{}
				if who.signer != nil {
					b = boundBody(thread, runID, chainOf(t, who.signer), "")
					hd = presenterHdr(who.signer, b)
				} else {
					b = input(thread, runID, "")
				}
				hd[agui.IdempotencyHeader] = idem[agui.IdempotencyHeader]
				code, _, got := jsonCall(t, "POST", url, b, hd)
				msg := mustJSON(got)
				if code != 403 || errCode(got) != door.CodeMembershipRequired || strings.Contains(msg, f.RunID) {
					t.Fatalf("runId %s: %d %s", runID, code, msg)
				}
			}
			if n := runCount(t, a.h); n != runs {
				t.Fatalf("%d runs, want %d", n, runs)
			}
			for _, last := range []string{"0", "1", "3", "5", "99"} {
				hd := map[string]string{agui.LastEventIDHeader: last}
				unknown := a.get("/runs/run_000000000000000000000000/events", hd)
				got := a.get("/runs/"+f.RunID+"/events", hd)
				got.Message = replaceID(got.Message, f.RunID, "run_000000000000000000000000")
				unknownLike(t, got, unknown)
			}
		})
	}
}
