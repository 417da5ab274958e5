package agui_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// authz is a local stack with one agent, two callers (a head H that
// delegated to a presenter P) and a stranger, another provider, and the
// authorizer seat under the test's control.
type authz struct {
	t                 *testing.T
	h                 *nodetest.Harness
	p, other          *nodetest.Prov
	head, pres, stray *identity.Signer
	prov, otherProv   *identity.Signer
	srv               string
	seat              string
	n                 int
}

func newAuthz(t *testing.T) *authz {
	a := &authz{t: t, h: nodetest.Start(t, nil)}
	a.p = a.h.Connect(0xe1, nil)
	a.p.Register("echo")
	a.other = a.h.Connect(0xe2, nil)
	a.other.Register("else")
	a.head, a.pres, a.stray = signer(t, 0xc1), signer(t, 0xc2), signer(t, 0xc9)
	a.prov, a.otherProv = signer(t, 0xe1), signer(t, 0xe2)
	a.srv = startDoor(t, a.h, func(o *agui.Options) {
		o.AuthorizedKey = func(*http.Request) string { return a.seat }
	}).URL
	return a
}

// delegated is H's chain extended by P: head H, presenter P.
func (a *authz) delegated() []string {
	h0, err := identity.SignHop(a.head, nil, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	h1, err := identity.SignHop(a.pres, &h0, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	return []string{h0.Token, h1.Token}
}

func boundBody(thread, runID string, chain []string, extra string) string {
	b, _ := json.Marshal(chain)
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{"actorChain":%s}%s}`,
		thread, runID, b, extra)
}

// completedBound runs one turn on a new thread bound to H, presented by P.
func (a *authz) completedBound() (thread, runID string) {
	a.t.Helper()
	a.n++
	body := boundBody("t-new", fmt.Sprintf("r%d", a.n), a.delegated(), "")
	s := openStream(a.t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", body, presenterHdr(a.pres, body))
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	a.h.WaitStatus(f.RunID, run.Completed)
	return *f.ThreadID, f.RunID
}

// pausedBound opens a thread bound to H (presented by H) whose run pauses
// on interrupt int1 (ask tc1) and tool call tc2.
func (a *authz) pausedBound() wire.RunFrame {
	a.t.Helper()
	a.n++
	body := boundBody("t-new", fmt.Sprintf("r%d", a.n), chainOf(a.t, a.head), "")
	s := openStream(a.t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", body, presenterHdr(a.head, body))
	return pause(a.t, a.h, a.p, s)
}

func view(s *identity.Signer, id string, ts int64) map[string]string {
	return map[string]string{door.ViewHeader: identity.MakeViewHeader(s, id, ts)}
}

// raw is a response as a caller sees it: status, code, message.
type raw struct {
	Status  int
	Type    string
	Code    string
	Message string
}

func (a *authz) get(path string, hdr map[string]string) raw {
	a.t.Helper()
	resp, cancel := do(a.t, "GET", a.srv+path, "", hdr)
	defer cancel()
	defer resp.Body.Close()
	out := raw{Status: resp.StatusCode, Type: resp.Header.Get("Content-Type")}
	if strings.HasPrefix(out.Type, "application/json") {
		b, _ := io.ReadAll(resp.Body)
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &env)
		out.Code, out.Message = env.Error.Code, env.Error.Message
	}
	return out
}

// unknownLike asserts got is exactly what an unknown id gets: the same
// status, code and message, the id being the same.
func unknownLike(t *testing.T, got, unknown raw) {
	t.Helper()
	if got != unknown || got.Status != 404 {
		t.Fatalf("got %+v, want exactly the unknown id's %+v", got, unknown)
	}
}

// Reproduction (issue 17, bullet 1): a bound thread's snapshot and a bound
// run's events were served to anyone holding the id.
func TestBoundReadsAnswerOnlyParties(t *testing.T) {
	a := newAuthz(t)
	thread, runID := a.completedBound()
	// The unknown-id answers to compare with: same ids, deleted from view.
	unknownThread := a.get("/threads/thread_000000000000000000000000", nil)
	unknownRun := a.get("/runs/run_000000000000000000000000/events", nil)
	swap := func(r raw, from, to string) raw { r.Message = strings.ReplaceAll(r.Message, from, to); return r }

	if got := a.get("/threads/"+thread, nil); swap(got, thread, "thread_000000000000000000000000") != unknownThread {
		t.Fatalf("a stranger read the bound thread: %+v (unknown: %+v)", got, unknownThread)
	}
	if got := a.get("/runs/"+runID+"/events", nil); swap(got, runID, "run_000000000000000000000000") != unknownRun {
		t.Fatalf("a stranger read the bound run's events: %+v (unknown: %+v)", got, unknownRun)
	}
	if got := a.get("/threads/"+thread, view(a.head, thread, time.Now().Unix())); got.Status != 200 {
		t.Fatalf("the head's view proof: %+v", got)
	}
	if got := a.get("/runs/"+runID+"/events", view(a.prov, runID, time.Now().Unix())); got.Status != 200 {
		t.Fatalf("the provider's view proof: %+v", got)
	}
}

// Reproduction (bullet 3): a retried answer streamed round 1 (seq 1–5,
// ending on the question), not the round it opened.
func TestRetriedAnswerStreamsItsRound(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f := pause(t, h, p, s)
	body := answerBody(*f.ThreadID, "ans-1")
	s2 := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
	p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	first := idsOf(s2.rest())
	h.WaitStatus(f.RunID, run.Completed)
	again := idsOf(openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil).rest())
	if !slices.Equal(first, []string{"5", "6", "7", "8", "9"}) || !slices.Equal(again, first) {
		t.Fatalf("answer streamed %v, its retry %v: want the answered round both times", first, again)
	}
}

// Reproduction (bullet 4): the same first-turn POST (invented threadId,
// same runId, no Idempotency-Key) sent twice made two threads and two runs.
// The caller is known (the authorizer's seat): an anonymous caller's ids
// are not matched (TestAnonymousStrangersDoNotShareAFirstTurn).
func TestRetriedFirstTurnRunsOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	caller := signer(t, 0xc3).PublicKeyHex()
	srv := startDoor(t, h, func(o *agui.Options) { o.AuthorizedKey = func(*http.Request) string { return caller } })
	body := input("client-thread-1", "client-run-1", "")
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	first := typesOf(t, s.rest())
	h.WaitStatus(f.RunID, run.Completed)
	again := typesOf(t, openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil).rest())
	if runCount(t, h) != 1 || threadCount(t, h) != 1 || !slices.Equal(first, again) {
		t.Fatalf("retry: %d runs, %d threads; streams %v then %v", runCount(t, h), threadCount(t, h), first, again)
	}
	// Another body under the same ids is another turn, not the retry.
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), strings.Replace(body, `"hi"`, `"other"`, 1), nil)
	f2 := p.Offer()
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f2.ThreadID)
	s.rest()
	if f2.RunID == f.RunID || runCount(t, h) != 2 {
		t.Fatalf("another body was taken for the retry: %s", f2.RunID)
	}
}

// Reproduction (outside test): two anonymous callers sending the same
// first turn (the README's example body, say) were one conversation: the
// second was handed the first's run, and with it the thread the first
// went on with. Ids a caller chose are not credentials (design.md D16):
// each anonymous first turn is its own run on its own thread.
func TestAnonymousStrangersDoNotShareAFirstTurn(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	body := input("new", "r1", "")
	var threads []string
	for range 2 {
		s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
		s.rest()
		threads = append(threads, *f.ThreadID)
	}
	if runCount(t, h) != 2 || threadCount(t, h) != 2 || threads[0] == threads[1] {
		t.Fatalf("two strangers: %d runs, %d threads, threads %v", runCount(t, h), threadCount(t, h), threads)
	}
}

// Reproduction (bullet 2, Idempotency-Key): a key was matched agent-wide,
// across callers. Now it is scoped to the caller; an anonymous key reused
// with another body is refused 422.
func TestIdempotencyKeyBelongsToItsCaller(t *testing.T) {
	a := newAuthz(t)
	url := a.srv + "/agui/" + a.p.Key + "/echo"
	key := map[string]string{agui.IdempotencyHeader: "k-1"}
	// Caller A (authenticated by the seat).
	a.seat = a.head.PublicKeyHex()
	s := openStream(t, "POST", url, input("", "ra", ""), key)
	fa := a.p.Offer()
	a.p.Accept(fa.RunID)
	a.p.Complete(fa.RunID, *fa.ThreadID)
	s.rest()
	// Caller B, another key, the same Idempotency-Key: its own run.
	a.seat = a.stray.PublicKeyHex()
	s = openStream(t, "POST", url, input("", "rb", ""), key)
	fb := a.p.Offer()
	if fb.RunID == fa.RunID {
		t.Fatal("caller B was answered with caller A's run")
	}
	a.p.Accept(fb.RunID)
	a.p.Complete(fb.RunID, *fb.ThreadID)
	s.rest()
	// Anonymous: the key plus the request's hash.
	a.seat = ""
	s = openStream(t, "POST", url, input("", "rc", ""), key)
	fc := a.p.Offer()
	a.p.Accept(fc.RunID)
	a.p.Complete(fc.RunID, *fc.ThreadID)
	s.rest()
	runs := runCount(t, a.h)
	code, _, got := jsonCall(t, "POST", url, input("", "rd", ""), key)
	if code != 422 || errCode(got) != door.CodeIdempotencyKeyReused || runCount(t, a.h) != runs {
		t.Fatalf("anonymous key reused with another body: %d %v", code, got)
	}
}

// Reproduction (bullet 6): on a bound thread a pause was answered after a
// membership check only. The answer carries the resolution proof.
func TestAnswerNeedsResolutionProof(t *testing.T) {
	a := newAuthz(t)
	f := a.pausedBound()
	thread := *f.ThreadID
	asks := []string{"tc1", "tc2"}
	answer := func(runID, extra string) string {
		return fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[%s],"tools":[],"context":[],"forwardedProps":{"actorChain":%s%s},%s}`,
			thread, runID, toolTC2, mustJSON(chainOf(t, a.head)), extra, resumeInt1)
	}
	url := a.srv + "/agui/" + a.p.Key + "/echo"
	body := answer("a1", "")
	code, _, got := jsonCall(t, "POST", url, body, presenterHdr(a.head, body))
	if code != 401 || errCode(got) != door.CodeInvalidResolution || a.h.Run(f.RunID).Status != run.InputRequired {
		t.Fatalf("answer without proof: %d %v", code, got)
	}
	body = answer("a2", `,"resolution":`+resolution(a.head, f.RunID, asks))
	s := openStream(t, "POST", url, body, presenterHdr(a.head, body))
	if f2 := a.p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("the answer opened %s", f2.RunID)
	}
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, thread)
	s.rest()
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func resolution(s *identity.Signer, runID string, asks []string) string {
	return mustJSON(map[string]string{"publicKey": s.PublicKeyHex(), "signature": s.Sign(identity.ResolutionPayload(runID, asks))})
}

// A runId belongs to its caller (D17) on a thread as on a new one: on a
// thread two callers share, a caller's retry streams its run again and a
// changed request under its runId is refused 422, but another caller's
// turn with the same runId — the same body or another — is that caller's
// own run, never a refusal about someone else's id and never the other
// caller's run.
func TestRunIDOnASharedThreadBelongsToItsCaller(t *testing.T) {
	a := newAuthz(t)
	url := a.srv + "/agui/" + a.p.Key + "/echo"
	turn := func(thread, runID, text string) string {
		return fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u-%s","role":"user","content":%q}],"tools":[],"context":[],"forwardedProps":{}}`,
			thread, runID, runID, text)
	}
	// runOf streams one turn; a new run is offered and completed.
	runOf := func(what, body string) string {
		t.Helper()
		s := openStream(t, "POST", url, body, nil)
		f := a.p.Offer()
		a.p.Accept(f.RunID)
		a.p.Complete(f.RunID, *f.ThreadID)
		fs := events(s.rest())
		if len(fs) == 0 || fs[0].event(t)["runId"] != f.RunID {
			t.Fatalf("%s: stream %v, want run %s", what, fs, f.RunID)
		}
		return f.RunID
	}
	// An anonymous first turn opens an unbound thread.
	a.seat = ""
	first := runOf("the first turn", turn("t-new", "r-open", "open"))
	thread := a.h.Run(first).ThreadID

	a.seat = a.head.PublicKeyHex()
	mine := runOf("A's turn", turn(thread, "r-same", "hello"))
	runs := runCount(t, a.h)
	s := openStream(t, "POST", url, turn(thread, "r-same", "hello"), nil)
	if fs := events(s.rest()); len(fs) == 0 || fs[0].event(t)["runId"] != mine || runCount(t, a.h) != runs {
		t.Fatalf("A's retry: %v, want run %s again and no new run", fs, mine)
	}
	if code, _, got := jsonCall(t, "POST", url, turn(thread, "r-same", "changed"), nil); code != 422 || errCode(got) != door.CodeIdempotencyKeyReused {
		t.Fatalf("A reusing its runId for another turn: %d %v, want 422", code, got)
	}

	for _, tc := range []struct {
		name, seat, text string
	}{
		{"B, another turn", a.stray.PublicKeyHex(), "from B"},
		{"P, the same turn", a.pres.PublicKeyHex(), "hello"},
	} {
		a.seat = tc.seat
		resp, cancel := do(t, "POST", url, turn(thread, "r-same", tc.text), nil)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			t.Fatalf("%s: %d %s: the runId is A's, not this caller's", tc.name, resp.StatusCode, b)
		}
		s := &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
		fr, _ := s.next() // the stream's opening comment names its run
		id := strings.TrimPrefix(fr.Comment, "funduq run ")
		if id == mine {
			s.close()
			t.Fatalf("%s: streamed A's run %s: this caller's turn was dropped", tc.name, mine)
		}
		f := a.p.Offer()
		if f.RunID != id || !strings.Contains(string(f.RunInput), tc.text) {
			t.Fatalf("%s: offered %s, want its own run %s with %q", tc.name, f.RunID, id, tc.text)
		}
		a.p.Accept(f.RunID)
		a.p.Complete(f.RunID, *f.ThreadID)
		s.rest()
		s.close()
	}
}
