package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// An AG-UI client such as @ag-ui/client's HttpAgent sends, on every turn,
// the whole conversation it holds: the earlier turns' messages (the
// caller's, with its own ids, and the agent's replies, with theirs) and
// then the new one. The thread's record keeps each message once: a
// newcomer's second turn through HttpAgent left GET /threads/{id} with the
// first turn twice. And the agent is handed the new message alone, as for
// a client that sends only it: the history it reads from the record
// (design.md §The doors, "The history an AG-UI client sends again").
func TestHistoryResentByTheClientIsStoredOnce(t *testing.T) {
	h, p, srv, url := echoDoorSrv(t)
	thread := doneThread(t, h, p, url) // u1 "hi", then the agent's m1 "hello"

	body := fmt.Sprintf(`{"threadId":%q,"runId":"r2","state":{},"tools":[],"context":[],"forwardedProps":{},"messages":[`+
		`{"id":"u1","role":"user","content":"hi"},`+
		`{"id":"m1","role":"assistant","content":"hello"},`+
		`{"id":"u2","role":"user","content":"again"}]}`, thread)
	s := openStream(t, "POST", url, body, nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, thread)
	s.rest()

	wantHanded(t, f, "[user:again]", "the new message alone")
	wantThread(t, srv, thread, "[user:hi assistant:hello user:again assistant:hello]")
}

// A message that repeats what was said but follows the whole record is
// new, however like an earlier one it is: "hi", then "hi" again as the
// next turn, by a client sending the conversation it holds.
func TestResentHistoryKeepsARepeatedNewMessage(t *testing.T) {
	h, p, srv, url := echoDoorSrv(t)
	thread := doneThread(t, h, p, url) // u1 "hi", then the agent's m1 "hello"

	f := turn(t, p, url, thread, `{"id":"u1","role":"user","content":"hi"},`+
		`{"id":"m1","role":"assistant","content":"hello"},`+
		`{"id":"u2","role":"user","content":"hi"}`, "m2")
	wantHanded(t, f, "[user:hi]", "")
	wantThread(t, srv, thread, "[user:hi assistant:hello user:hi assistant:m2]")
}

// A client that sends only its new message (the README's advice before
// this rule) is read as before, even when that message is the thread's
// first one again, or the record's opening: nothing it sends is dropped.
func TestOnlyTheNewMessageIsStoredAsBefore(t *testing.T) {
	h, p, srv, url := echoDoorSrv(t)
	thread := doneThread(t, h, p, url) // u1 "hi", then the agent's m1 "hello"

	f := turn(t, p, url, thread, `{"id":"u2","role":"user","content":"hi"}`, "m2")
	wantHanded(t, f, "[user:hi]", "")
	// Two new messages, fewer than the record holds: both the caller's.
	f = turn(t, p, url, thread, `{"id":"u3","role":"user","content":"hi"},{"id":"u4","role":"user","content":"hi"}`, "m3")
	wantHanded(t, f, "[user:hi user:hi]", "")
	wantThread(t, srv, thread, "[user:hi assistant:hello user:hi assistant:m2 user:hi user:hi assistant:m3]")
}

// A history that is not the record's — an agent's reply under an id the
// agent never gave it, a message the record does not hold, or a copy
// shorter than the record — is the caller's to say, and stored as sent.
func TestHistoryNotTheRecordsIsStoredAsSent(t *testing.T) {
	h, p, srv, url := echoDoorSrv(t)
	thread := doneThread(t, h, p, url) // u1 "hi", then the agent's m1 "hello"

	f := turn(t, p, url, thread, `{"id":"u1","role":"user","content":"hi"},`+
		`{"id":"not-m1","role":"assistant","content":"hello"},`+
		`{"id":"u2","role":"user","content":"again"}`, "m2")
	wantHanded(t, f, "[user:hi assistant:hello user:again]", "the three messages sent")
	wantThread(t, srv, thread, "[user:hi assistant:hello user:hi assistant:hello user:again assistant:m2]")

	other := doneThread(t, h, p, url)
	f = turn(t, p, url, other, `{"id":"u1","role":"user","content":"hi"},`+
		`{"id":"m1","role":"assistant","content":"hello, world"},`+
		`{"id":"u3","role":"user","content":"more"}`, "m3")
	wantHanded(t, f, "[user:hi assistant:hello, world user:more]", "the three messages sent")
	wantThread(t, srv, other, "[user:hi assistant:hello user:hi assistant:hello, world user:more assistant:m3]")
}

// turn sends one turn on thread carrying msgs (JSON objects, comma
// separated), has the provider answer it with a reply whose id and text
// are reply, and returns the run as offered.
func turn(t *testing.T, p *nodetest.Prov, url, thread, msgs, reply string) wire.RunFrame {
	t.Helper()
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"state":{},"tools":[],"context":[],"forwardedProps":{},"messages":[%s]}`,
		thread, "r-"+reply, msgs)
	s := openStream(t, "POST", url, body, nil)
	f := p.Offer()
	p.Accept(f.RunID)
	answerText(p, f.RunID, thread, reply, reply)
	s.rest()
	return f
}

// answerText has p answer run runID on thread with one assistant message,
// messageID saying text, and finish the run.
func answerText(p *nodetest.Prov, runID, thread, messageID, text string) {
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, runID))
	p.Event(runID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, messageID))
	p.Event(runID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":%q}`, messageID, text))
	p.Event(runID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_END","messageId":%q}`, messageID))
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, runID))
	p.Finish(runID)
}

// echoDoorSrv is echoDoor with the door's server too, whose GET
// /threads/{id} these tests read (threadSaid).
func echoDoorSrv(t *testing.T) (*nodetest.Harness, *nodetest.Prov, *httptest.Server, string) {
	t.Helper()
	h := nodetest.Start(t, nil)
	p, srv := echoServed(t, h)
	return h, p, srv, aguiURL(srv, p.Key, "echo")
}

// handed is the messages of a run's input as role:content.
func handed(t *testing.T, f wire.RunFrame) string {
	t.Helper()
	var in struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatalf("run input %s: %v", f.RunInput, err)
	}
	var said []string
	for _, m := range in.Messages {
		said = append(said, fmt.Sprint(m["role"], ":", m["content"]))
	}
	return fmt.Sprint(said)
}

// wantHanded fails t, going on, unless the messages of run f's input are
// want (as handed); why, when set, says what want is.
func wantHanded(t *testing.T, f wire.RunFrame, want, why string) {
	t.Helper()
	if got := handed(t, f); got != want {
		if why != "" {
			want = why + ": " + want
		}
		t.Errorf("the agent was handed %s, want %s", got, want)
	}
}

// threadSaid is GET /threads/{id}'s messages as role:content.
func threadSaid(t *testing.T, srv *httptest.Server, thread string) string {
	t.Helper()
	_, _, snap := jsonCall(t, "GET", srv.URL+"/threads/"+thread, "", nil)
	var said []string
	for _, m := range snap["messages"].([]any) {
		msg := m.(map[string]any)
		said = append(said, fmt.Sprint(msg["role"], ":", msg["content"]))
	}
	return fmt.Sprint(said)
}

// wantThread fails t unless GET /threads/{thread} holds want, its
// messages as role:content (threadSaid).
func wantThread(t *testing.T, srv *httptest.Server, thread, want string) {
	t.Helper()
	if got := threadSaid(t, srv, thread); got != want {
		t.Fatalf("thread holds %s, want %s", got, want)
	}
}

// TestAGUIClientSecondTurnIsStoredOnce drives two turns of the official
// @ag-ui/client HttpAgent (e2e/history.mjs): "yes", answered "ok", then
// "yes" again, answered "ok" again. The client sends the first turn again
// with the second; the thread holds each message once, the repeated "yes"
// included, and the agent is handed each turn's new message alone.
func TestAGUIClientSecondTurnIsStoredOnce(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@ag-ui/client")
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe4, nil)
	p.Register("yes")
	srv := startDoor(t, h, nil)

	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	cmd := exec.CommandContext(ctx, node, "history.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+p.Key, "FUNDUQ_AGENT=yes", "NODE_ENV=test")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, reply := range []string{"a1", "a2"} {
		f := p.Offer()
		inputs = append(inputs, handed(t, f))
		p.Accept(f.RunID)
		answerText(p, f.RunID, *f.ThreadID, reply, "ok")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node history.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var rep struct {
		Error    *string
		ThreadID string
		Messages []map[string]any
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	if rep.Error != nil {
		t.Fatalf("the client failed: %s", *rep.Error)
	}
	if len(rep.Messages) != 4 {
		t.Fatalf("the client holds %v, want its two turns", rep.Messages)
	}
	if got := fmt.Sprint(inputs); got != "[[user:yes] [user:yes]]" {
		t.Errorf("the agent was handed %s, want each turn's new message alone", got)
	}
	wantThread(t, srv, rep.ThreadID, "[user:yes assistant:ok user:yes assistant:ok]")
}

// On a bound thread the record decides what a request repeats only for a
// caller who may read it (D16): a party's copy of the history is not said
// again; a presenter the head delegated to, who may write but not read,
// has its request taken as sent, so nothing it sends is weighed against
// a record it may not see.
func TestResentHistoryOnABoundThreadIsWeighedOnlyForParties(t *testing.T) {
	a := newAuthz(t)
	url := a.srv + "/agui/" + a.p.Key + "/echo"
	history := `{"id":"u1","role":"user","content":"hi"},{"id":"m1","role":"assistant","content":"hello"},`
	send := func(thread, runID string, by *identity.Signer, chain []string, next string) string {
		t.Helper()
		c, _ := json.Marshal(chain)
		body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[%s%s],"tools":[],"context":[],"forwardedProps":{"actorChain":%s}}`,
			thread, runID, history, next, c)
		s := openStream(t, "POST", url, body, presenterHdr(by, body))
		f := a.p.Offer()
		a.p.Accept(f.RunID)
		a.p.Complete(f.RunID, thread)
		s.rest()
		a.h.WaitStatus(f.RunID, run.Completed)
		return handed(t, f)
	}

	thread, _ := a.completedBound() // H's, presented by P: "hi", then m1 "hello"
	if got := send(thread, "p2", a.pres, a.delegated(), `{"id":"u2","role":"user","content":"again"}`); got != "[user:again]" {
		t.Errorf("the recorded presenter's turn handed the agent %s, want [user:again]", got)
	}

	other, _ := a.completedBound()
	h0, err := identity.SignHop(a.head, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := identity.SignHop(a.stray, &h0, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := send(other, "s2", a.stray, []string{h0.Token, h1.Token}, `{"id":"u2","role":"user","content":"again"}`)
	if got != "[user:hi assistant:hello user:again]" {
		t.Errorf("a presenter who may not read the thread handed the agent %s, want its request as sent", got)
	}
	if r := a.get("/threads/"+other, nil); r.Status != 404 {
		t.Fatalf("the thread answered a reader with no key: %+v", r)
	}
}

// An answer sent with the conversation the client holds (the caller's
// message, the agent's tool call as the stream built it, then the tool's
// result) reopens the paused run with the result alone: the record holds
// the tool call once, and the agent is handed only what answers it.
func TestResentHistoryInAnAnswerIsStoredOnce(t *testing.T) {
	h, p, srv, url := echoDoorSrv(t)
	f := pause(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil)) // "hi", then tool call tc2
	thread := *f.ThreadID

	body := fmt.Sprintf(`{"threadId":%q,"runId":"r2","messages":[`+
		`{"id":"u1","role":"user","content":"hi"},`+
		`{"id":"tc2","role":"assistant","toolCalls":[{"id":"tc2","type":"function","function":{"name":"lookup","arguments":""}}]},`+
		`%s],"tools":[],"context":[],"forwardedProps":{},%s}`, thread, toolTC2, resumeInt1)
	s := openStream(t, "POST", url, body, nil)
	f2 := p.Offer()
	if f2.RunID != f.RunID {
		t.Fatalf("the answer made run %s, want the paused %s reopened", f2.RunID, f.RunID)
	}
	if got := handed(t, f2); got != "[tool:42]" {
		t.Errorf("the answer handed the agent %s, want the tool's result alone: [tool:42]", got)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, thread)
	s.rest()
	wantThread(t, srv, thread, "[user:hi assistant:<nil> tool:42 assistant:hello]")
}
