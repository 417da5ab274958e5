package console_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/core/run"
)

// whose is one row of the console's failures list, with the author the
// console names (design.md §The console, whose reason).
type whose struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
	Count  int64  `json:"count"`
}

// failuresByAuthor reads the console's failures list.
func failuresByAuthor(t *testing.T, base string) []whose {
	t.Helper()
	resp, body := get(t, base+"/console/api/state", "Authorization", "Bearer "+token)
	var s struct {
		Failures struct {
			List []whose `json:"list"`
		} `json:"failures"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("state: %d %s", resp.StatusCode, body)
	}
	return s.Failures.List
}

// A provider writes its refusal's reason and its RUN_ERROR's code in its
// own words, and may choose words funduq uses for its own reasons: the
// console lists such a failure as the provider's, apart from the same
// text funduq wrote, so an operator is not shown a restart (or an offline
// agent) that did not happen. The caller's RUN_ERROR for a refusal
// carries the provider's words as code and message — not funduq's
// sentence for the reason it collides with. No quality counter moves: a
// refusal is an honest answer (seed: decline or refuse).
func TestConsoleSaysWhoseFailureReason(t *testing.T) {
	h := nodetest.Start(t, withToken)
	p := h.Connect(0xc8, nil)
	p.Register("echo")
	offered := func() (id, thread string) {
		t.Helper()
		id, thread = h.Door(p.Key, "echo", "", "x")
		if f := p.Offer(); f.RunID != id {
			t.Fatalf("offered %s, want %s", f.RunID, id)
		}
		return id, thread
	}
	ended := string(run.ReasonStreamEndedWithoutFinishing)
	restart := string(run.ReasonOrphanedByRestart)
	offline := string(run.ReasonAgentOffline)

	// funduq's own: the stream ended with no RUN_FINISHED.
	own, _ := offered()
	p.Accept(own)
	p.Finish(own)
	h.WaitStatus(own, run.Failed)

	// The provider's, in funduq's words: two refusals and a RUN_ERROR.
	same, _ := offered()
	p.Refuse(same, ended)
	h.WaitStatus(same, run.Failed)
	restarted, _ := offered()
	p.Refuse(restarted, restart)
	h.WaitStatus(restarted, run.Failed)
	errored, thread := offered()
	p.Accept(errored)
	p.Event(errored, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, errored))
	p.Event(errored, fmt.Sprintf(`{"type":"RUN_ERROR","message":"no agent here","code":%q}`, offline))
	p.Finish(errored)
	h.WaitStatus(errored, run.Failed)

	got := map[whose]bool{}
	for _, f := range failuresByAuthor(t, h.URL) {
		got[f] = true
	}
	for _, want := range []whose{
		{ended, "funduq", 1}, {ended, "provider", 1}, {restart, "provider", 1}, {offline, "provider", 1},
	} {
		if !got[want] {
			t.Errorf("the console does not list %+v; it lists %+v", want, got)
		}
	}

	// What the caller reads: the provider's words, as code and message.
	evs := h.Events(restarted)
	last := evs[len(evs)-1]
	if last["type"] != "RUN_ERROR" || last["code"] != restart || last["message"] != restart {
		t.Errorf("a refusal in funduq's words reaches the caller as %v", last)
	}
	q := h.Quality(p.Key)
	if q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered != 0 {
		t.Errorf("quality counters moved: %+v", q)
	}
}

// In a real browser: a refusal in funduq's words is listed with its
// author, the provider, beside funduq's own failure of the same text.
func TestConsoleSaysWhoseFailureReasonInBrowser(t *testing.T) {
	h := nodetest.Start(t, withToken)
	b := loggedIn(t, h.URL)
	p := h.Connect(0xc9, nil)
	p.Register("echo")
	ended := string(run.ReasonStreamEndedWithoutFinishing)
	own, _ := h.Door(p.Key, "echo", "", "x")
	p.Offer()
	p.Accept(own)
	p.Finish(own)
	h.WaitStatus(own, run.Failed)
	theirs, _ := h.Door(p.Key, "echo", "", "x")
	p.Offer()
	p.Refuse(theirs, ended)
	h.WaitStatus(theirs, run.Failed)

	rows := `[...document.querySelectorAll('#failures tbody tr')].map((r) => [...r.children].slice(0, 3).map((c) => c.textContent).join('|'))`
	b.Eventually("both failures are listed", rows+`.length === 2`)
	got := browsertest.Eval[[]string](b, rows)
	slices.Sort(got)
	if want := []string{ended + "|funduq|1", ended + "|provider|1"}; !slices.Equal(got, want) {
		t.Fatalf("the failures read %q, want %q", got, want)
	}
	b.CheckClean()
}
