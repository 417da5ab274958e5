package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// Outside probes of pause and resume (design.md D1, D7, D16): raw-wire
// providers driven step by step, real HTTP callers of the AG-UI door.

// pauseOn runs a first round that ends on the interrupts given (a JSON
// array), after the extra events; the caller's stream ends on the pause.
func pauseOn(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, s *stream, interrupts string) wire.RunFrame {
	t.Helper()
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":%s}}`,
		*f.ThreadID, f.RunID, interrupts))
	p.Finish(f.RunID)
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "RUN_FINISHED"}) {
		t.Fatalf("pausing round %v", got)
	}
	h.WaitStatus(f.RunID, run.InputRequired)
	return f
}

// echoDoor is a node with one provider serving "echo" and an AG-UI door
// in front of it; url is that agent's endpoint.
func echoDoor(t *testing.T) (*nodetest.Harness, *nodetest.Prov, string) {
	t.Helper()
	h := nodetest.Start(t, nil)
	p, srv := echoServed(t, h)
	return h, p, aguiURL(srv, p.Key, "echo")
}

// runStartedFor is the RUN_STARTED a provider sends for run frame f.
func runStartedFor(f wire.RunFrame) string {
	return fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID)
}

func resumeBody(thread, runID, resume string) string {
	return fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":%s}`,
		thread, runID, resume)
}

// finishResumed checks the offer is the paused run reopened with the
// answer, completes it and reads the caller's stream to its end.
func finishResumed(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, s *stream, f wire.RunFrame, want ...string) []frame {
	t.Helper()
	f2 := p.Offer()
	if f2.RunID != f.RunID {
		t.Fatalf("offered %s, want the paused run %s", f2.RunID, f.RunID)
	}
	var in struct {
		Resume []struct {
			InterruptID string `json:"interruptId"`
		} `json:"resume"`
	}
	_ = json.Unmarshal(f2.RunInput, &in)
	var got []string
	for _, r := range in.Resume {
		got = append(got, r.InterruptID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resumed input answers %v, want %v: %s", got, want, f2.RunInput)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f.ThreadID)
	fs := s.rest()
	if got := typesOf(t, fs); len(got) == 0 || got[len(got)-1] != "RUN_FINISHED" {
		t.Fatalf("resumed stream %v", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	return fs
}

// On a bound thread with a head and a presenter, a paused run's thread and
// events are read by the parties and by nobody else: a stranger gets
// exactly the unknown id's answer, and so does a stranger's resume.
func TestPausedBoundRunAnswersOnlyParties(t *testing.T) {
	a := newAuthz(t)
	a.n++
	body := boundBody("t-new", "r-pause", a.delegated(), "")
	f := pauseOn(t, a.h, a.p, openStream(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", body, presenterHdr(a.pres, body)),
		`[{"id":"int1","reason":"approval"}]`)
	thread := *f.ThreadID
	const unknownThread, unknownRun = "thread_000000000000000000000000", "run_000000000000000000000000"
	swap := func(r raw, from, to string) raw { r.Message = replaceID(r.Message, from, to); return r }

	unknownLike(t, swap(a.get("/threads/"+thread, nil), thread, unknownThread), a.get("/threads/"+unknownThread, nil))
	unknownLike(t, swap(a.get("/runs/"+f.RunID+"/events", nil), f.RunID, unknownRun), a.get("/runs/"+unknownRun+"/events", nil))
	a.seat = a.stray.PublicKeyHex()
	unknownLike(t, swap(a.get("/threads/"+thread, nil), thread, unknownThread), a.get("/threads/"+unknownThread, nil))
	unknownLike(t, swap(a.get("/runs/"+f.RunID+"/events", nil), f.RunID, unknownRun), a.get("/runs/"+unknownRun+"/events", nil))

	// A stranger's resume, seated or anonymous: the unknown thread's answer.
	runs := runCount(t, a.h)
	for _, seat := range []string{a.stray.PublicKeyHex(), ""} {
		a.seat = seat
		code, _, got := jsonCall(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", resumeBody(thread, "x", `[{"interruptId":"int1","status":"resolved"}]`), nil)
		ucode, _, ugot := jsonCall(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", resumeBody(unknownThread, "x", `[{"interruptId":"int1","status":"resolved"}]`), nil)
		if code != 404 || ucode != code || replaceID(mustJSON(got), thread, unknownThread) != mustJSON(ugot) {
			t.Fatalf("stranger's resume %d %v, unknown thread %d %v", code, got, ucode, ugot)
		}
	}
	// The parties read it: the presenter by its seat, the head by a view proof.
	a.seat = a.pres.PublicKeyHex()
	if got := a.get("/threads/"+thread, nil); got.Status != 200 {
		t.Fatalf("presenter's read %+v", got)
	}
	a.seat = ""
	if got := a.get("/runs/"+f.RunID+"/events", view(a.head, f.RunID, time.Now().Unix())); got.Status != 200 {
		t.Fatalf("head's read %+v", got)
	}
	if runCount(t, a.h) != runs || a.h.Run(f.RunID).Status != run.InputRequired {
		t.Fatal("a stranger's resume wrote something")
	}
	// The head answers, with its resolution proof: the run goes on.
	chain := chainOf(t, a.head)
	ans := fmt.Sprintf(`{"threadId":%q,"runId":"a1","messages":[],"tools":[],"context":[],"forwardedProps":{"actorChain":%s,"resolution":%s},"resume":[{"interruptId":"int1","status":"resolved"}]}`,
		thread, mustJSON(chain), resolution(a.head, f.RunID, []string{"int1"}))
	finishResumed(t, a.h, a.p, openStream(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", ans, presenterHdr(a.head, ans)), f, "int1")
	a.p.None()
}

// A resume that has nothing to land on — the run still live, an interrupt
// id that does not exist, one of another run — gets the snapshot and
// changes nothing; the live run carries on and nobody is offered anything.
func TestResumeWithNothingToLandOn(t *testing.T) {
	h, p, url := echoDoor(t)

	// Live: accepted and started, not paused.
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	h.Eventually("started", func() bool { return len(h.Events(f.RunID)) == 1 })
	runs := runCount(t, h)
	code, _, got := jsonCall(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	if code != 200 || got["thread_id"] != *f.ThreadID || got["waiting_run"] != nil {
		t.Fatalf("resume of a live run: %d %v", code, got)
	}
	if ar, _ := got["active_run"].(map[string]any); ar == nil || ar["run_id"] != f.RunID {
		t.Fatalf("snapshot's active run %v", got["active_run"])
	}
	p.None()
	if runCount(t, h) != runs || h.Run(f.RunID).Status != run.Running {
		t.Fatalf("a resume of a live run wrote: runs %d→%d, %s", runs, runCount(t, h), h.Run(f.RunID).Status)
	}
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"intA","reason":"approval"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.InputRequired)

	// Another thread paused on intB.
	g := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r2", ""), nil), `[{"id":"intB","reason":"approval"}]`)
	for _, ids := range []string{`"nope"`, `"intB"`} {
		code, _, got := jsonCall(t, "POST", url, resumeBody(*f.ThreadID, "a-"+ids, `[{"interruptId":`+ids+`,"status":"resolved"}]`), nil)
		if w, _ := got["waiting_run"].(map[string]any); code != 200 || w == nil || w["run_id"] != f.RunID {
			t.Fatalf("resume naming %s: %d %v", ids, code, got)
		}
	}
	p.None()
	if runCount(t, h) != runs+1 || h.Run(f.RunID).Status != run.InputRequired || h.Run(g.RunID).Status != run.InputRequired {
		t.Fatal("a resume naming no open interrupt wrote something")
	}
	// The right one still answers it.
	finishResumed(t, h, p, openStream(t, "POST", url, resumeBody(*f.ThreadID, "a-ok", `[{"interruptId":"intA","status":"resolved"}]`), nil), f, "intA")
	p.None()
}

// Two interrupts: answering one is no answer (the snapshot lists both);
// answering both reopens the run once with both answers.
func TestPauseWithTwoInterrupts(t *testing.T) {
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"a"},{"id":"int2","reason":"b"}]`)
	runs := runCount(t, h)
	code, _, got := jsonCall(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int2","status":"resolved"}]`), nil)
	w, _ := got["waiting_run"].(map[string]any)
	if code != 200 || w == nil || fmt.Sprint(w["outstanding_asks"]) != "[int1 int2]" {
		t.Fatalf("half an answer: %d %v", code, got)
	}
	p.None()
	if runCount(t, h) != runs || h.Run(f.RunID).Status != run.InputRequired {
		t.Fatal("half an answer wrote something")
	}
	finishResumed(t, h, p, openStream(t, "POST", url, resumeBody(*f.ThreadID, "a2",
		`[{"interruptId":"int2","status":"resolved"},{"interruptId":"int1","status":"cancelled"}]`), nil), f, "int2", "int1")
	p.None()
}

// A provider that goes on sending after its pausing RUN_FINISHED: nothing
// after the terminal event is stored or streamed (design.md §The status
// machine), each late report is answered (D15), the run is paused and its
// answer is offered as usual.
func TestEventsAfterThePause(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval"}]}}`, *f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"late","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"late","delta":"after the end"}`)
	p.Finish(f.RunID)
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "RUN_FINISHED"}) {
		t.Fatalf("caller saw %v", got)
	}
	r := h.WaitStatus(f.RunID, run.InputRequired)
	if n := len(h.Events(f.RunID)); n != 2 || !strings.Contains(string(r.Interrupt), "int1") {
		t.Fatalf("stored %d events, interrupt %s", n, r.Interrupt)
	}
	// Each late event is answered with an error naming the run.
	for range 2 {
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if e.RunID != f.RunID {
			t.Fatalf("error frame %+v", e)
		}
	}
	finishResumed(t, h, p, openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil), f, "int1")
	if n := len(h.Events(f.RunID)); n != 2+5 {
		t.Fatalf("after the resume %d events stored", n)
	}
	p.None()
}

// A provider whose link drops (no close frame) or who leaves (a close
// frame) while its run is paused: the run stays paused, and the answer is
// offered to the link that serves the agent when it comes.
func TestPausedRunOutlivesItsProviderLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(p *nodetest.Prov)
	}{
		{"dropped", (*nodetest.Prov).Close},
		{"goodbye", (*nodetest.Prov).Goodbye},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv := startDoor(t, h, nil)
			url := aguiURL(srv, p.Key, "echo")
			f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
			tc.leave(p)
			h.Advance(6 * time.Second) // past the link grace
			if r := h.Run(f.RunID); r.Status != run.InputRequired {
				t.Fatalf("paused run %s / %s after its provider left", r.Status, r.FailureReason)
			}
			if q := h.Quality(p.Key); q.Abandoned != 0 {
				t.Fatalf("a paused run counted abandoned: %+v", q)
			}
			p2 := h.Connect(0xe1, nil)
			p2.Register("echo")
			finishResumed(t, h, p2, openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil), f, "int1")
			p2.None()
		})
	}
}

// An answer given while the agent's only link is lost (no close frame)
// waits for the key within the link grace and is offered to the link that
// comes back. After a goodbye nobody serves the agent, and an answer then
// fails agent_offline at once like any run (design.md D8).
func TestResumeWhileProviderAway(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	p.Close()
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	h.Taken(f.RunID)
	if r := h.Run(f.RunID); r.Status != run.Queued {
		t.Fatalf("answered while the link is lost: %s / %s", r.Status, r.FailureReason)
	}
	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	finishResumed(t, h, p2, s, f, "int1")
	p2.None()

	g := pauseOn(t, h, p2, openStream(t, "POST", url, input("t", "r2", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	p2.Goodbye()
	h.Eventually("the agent unserved", func() bool { return len(h.Node.Broker.Snapshot().Served) == 0 })
	s = openStream(t, "POST", url, resumeBody(*g.ThreadID, "a2", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	evs := events(s.rest())
	r := h.WaitStatus(g.RunID, run.Failed)
	if last := evs[len(evs)-1].event(t); last["type"] != "RUN_ERROR" || r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("answered with nobody serving: last event %v, reason %q", last, r.FailureReason)
	}
}

// A provider that refuses the resumed offer: the run fails with the
// provider's reason, verbatim, and the caller's stream ends on RUN_ERROR.
// A decline only hands it back: it is offered again.
func TestResumedOfferRefusedOrDeclined(t *testing.T) {
	h, p, url := echoDoor(t)

	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	if f2 := p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("offered %s", f2.RunID)
	}
	p.Refuse(f.RunID, "no longer knows this conversation")
	evs := events(s.rest())
	last := evs[len(evs)-1].event(t)
	r := h.WaitStatus(f.RunID, run.Failed)
	if last["type"] != "RUN_ERROR" || r.FailureReason != "no longer knows this conversation" {
		t.Fatalf("refused resume: last event %v, reason %q", last, r.FailureReason)
	}
	// A resume of the failed run has nothing to land on.
	code, _, got := jsonCall(t, "POST", url, resumeBody(*f.ThreadID, "a2", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	if code != 200 || got["waiting_run"] != nil {
		t.Fatalf("resume after the refusal: %d %v", code, got)
	}
	p.None()

	g := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r3", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	s = openStream(t, "POST", url, resumeBody(*g.ThreadID, "a3", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	p.Offer()
	p.Decline(g.RunID)
	h.WaitStatus(g.RunID, run.Queued)
	p.None()
	p.Register("echo") // something changed (design.md D6: a decline is not re-offered until then)
	finishResumed(t, h, p, s, g, "int1")
}

// The leader fails over while runs are paused: they stay paused under the
// new leader (past provider_grace too); an answer given before the
// provider is back waits for it (it is expected back, D7) and is offered
// to it then, and the caller's stream carries the resumed round.
func TestResumeAfterFailover(t *testing.T) {
	a := nodetest.Start(t, func(c *config.Broker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, a, nil)
	url := aguiURL(srv, p.Key, "echo")
	f := pauseOn(t, a, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	g := pauseOn(t, a, p, openStream(t, "POST", url, input("t", "r2", ""), nil), `[{"id":"int1","reason":"approval"}]`)

	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	b.Taken(f.RunID)
	if r := b.Run(f.RunID); r.Status != run.Queued {
		t.Fatalf("answered before the provider is back: %s / %s", r.Status, r.FailureReason)
	}
	p2 := b.Connect(0xe1, nil)
	p2.Register("echo")
	if got := idsOf(finishResumed(t, b, p2, s, f, "int1")); !slices.Equal(got, []string{"3", "4", "5", "6", "7"}) {
		t.Fatalf("resumed stream ids %v", got)
	}
	b.Advance(31 * time.Second) // past provider_grace: nothing of a paused run is touched
	if r := b.Run(g.RunID); r.Status != run.InputRequired {
		t.Fatalf("paused run after failover and grace: %s / %s", r.Status, r.FailureReason)
	}
	finishResumed(t, b, p2, openStream(t, "POST", url, resumeBody(*g.ThreadID, "a2", `[{"interruptId":"int1","status":"resolved"}]`), nil), g, "int1")
	p2.None()
}

// Two answers of a bound thread's head at once, each with its proof, from
// two door instances: exactly one reopens the run, the other gets the
// snapshot, and the provider is offered the run once.
func TestConcurrentBoundResumes(t *testing.T) {
	a := newAuthz(t)
	f := a.pausedBound()
	doorB := startDoor(t, a.h, nil).URL
	chain := mustJSON(chainOf(t, a.head))
	proof := resolution(a.head, f.RunID, []string{"tc1", "tc2"})
	runs := runCount(t, a.h)
	type result struct {
		stream bool
		code   int
		snap   map[string]any
		err    error
	}
	results := make(chan result, 2)
	for i, srv := range []string{a.srv, doorB} {
		body := fmt.Sprintf(`{"threadId":%q,"runId":"race-%d","messages":[%s],"tools":[],"context":[],"forwardedProps":{"actorChain":%s,"resolution":%s},%s}`,
			*f.ThreadID, i, toolTC2, chain, proof, resumeInt1)
		go func() {
			// Not do: its t.Fatal would end this goroutine, not the test,
			// and the test would wait on results until its deadline.
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			t.Cleanup(cancel)
			req, _ := http.NewRequestWithContext(ctx, "POST", srv+"/agui/"+a.p.Key+"/echo", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range presenterHdr(a.head, body) {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Cleanup(func() { resp.Body.Close() })
				results <- result{stream: true, code: resp.StatusCode}
				return
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			results <- result{code: resp.StatusCode, snap: m}
		}()
	}
	streams := 0
	for range 2 {
		r := <-results
		switch {
		case r.err != nil:
			t.Fatalf("an answer: %v", r.err)
		case r.stream:
			streams++
		case r.code != 200 || r.snap["thread_id"] != *f.ThreadID:
			t.Fatalf("the losing answer: %d %v", r.code, r.snap)
		}
	}
	if streams != 1 {
		t.Fatalf("%d answers reopened the run", streams)
	}
	if f2 := a.p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("offered %s", f2.RunID)
	}
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	a.h.WaitStatus(f.RunID, run.Completed)
	a.p.None()
	if runCount(t, a.h) != runs {
		t.Fatal("an answer made a run")
	}
}

// An answer retried under its runId (no Idempotency-Key) after its round
// paused again on an interrupt of the same id streams the answered round
// and leaves the new question open.
func TestRetriedResumeAfterANewPause(t *testing.T) {
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	body := resumeBody(*f.ThreadID, "ans-1", `[{"interruptId":"int1","status":"resolved"}]`)
	s := openStream(t, "POST", url, body, nil)
	p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"again"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	first := idsOf(s.rest())
	h.WaitStatus(f.RunID, run.InputRequired)
	if got := idsOf(openStream(t, "POST", url, body, nil).rest()); !slices.Equal(got, first) {
		t.Fatalf("retry streamed %v, the answer %v", got, first)
	}
	p.None()
	if r := h.Run(f.RunID); r.Status != run.InputRequired || !strings.Contains(string(r.Interrupt), "again") {
		t.Fatalf("the retry moved the run: %s %s", r.Status, r.Interrupt)
	}
}
