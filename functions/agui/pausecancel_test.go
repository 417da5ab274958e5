package agui_test

// Outside probes of pause, answer and cancel together (design.md D1, §The
// status machine): a raw-wire provider, callers at the AG-UI door. AG-UI
// has no cancel (seed 004), so a cancel is asked at the A2A door, the one
// external cancel path (design.md §The doors).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// startA2A serves an A2A door on its own connections beside the AG-UI one.
func startA2A(t *testing.T, h *nodetest.Harness) *httptest.Server {
	t.Helper()
	deps := mustDeps(t, h, "")
	hd, err := a2a.New(a2a.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
		Tail: door.TailOptions{Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, DBCheck: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hd)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		deps.Close()
	})
	return srv
}

// a2aCall makes one JSON-RPC call at the A2A door of agent key/name and
// returns its result and error members.
func a2aCall(t *testing.T, srv *httptest.Server, key, name, method string, params any) (map[string]any, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	_, _, got := jsonCall(t, "POST", srv.URL+"/a2a/"+key+"/"+name, string(body), nil)
	res, _ := got["result"].(map[string]any)
	rpcErr, _ := got["error"].(map[string]any)
	return res, rpcErr
}

// A provider asked to cancel that pauses instead: the pause outranks the
// cancel (design.md §The status machine) and the caller's stream ends on
// the question, which the snapshot lists as waiting. A resume answers it
// like any pause (D1): the same run is offered again, not cancelled by the
// earlier request, and the caller streams the answered round.
func TestCancelledRunThatPausesIsAnswerable(t *testing.T) {
	h, p, url := echoDoor(t)
	a2aSrv := startA2A(t, h)
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	h.WaitStatus(f.RunID, run.Running)

	if res, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": f.RunID}); rpcErr != nil || res == nil {
		t.Fatalf("cancel: %v %v", res, rpcErr)
	}
	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "RUN_FINISHED"}) {
		t.Fatalf("pausing round %v", got)
	}
	h.WaitStatus(f.RunID, run.InputRequired)
	_, _, snap := jsonCall(t, "GET", startDoor(t, h, nil).URL+"/threads/"+*f.ThreadID, "", nil)
	if w, _ := snap["waiting_run"].(map[string]any); w == nil || w["run_id"] != f.RunID {
		t.Fatalf("snapshot after the pause %v", snap)
	}
	if _, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": f.RunID}); rpcErr == nil || rpcErr["code"] != float64(a2a.CodeTaskNotCancelable) {
		t.Fatalf("cancel of the paused run: %v", rpcErr)
	}

	// The answer to the question the snapshot lists streams its round (a
	// snapshot here would leave the run waiting forever: not cancelable,
	// and no answer lands).
	answer := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	finishResumed(t, h, p, answer, f, "int1")
	p.None()
}

// A provider that reports for its run while the run is paused (an ack, an
// event, a finish, after its finish frame), or reports the answered round
// twice: each report is answered with an error naming the run (D15),
// nothing is stored after a round's end, the pause stays answerable and
// the answered round ends once.
func TestReportsAroundAPauseAndItsAnswer(t *testing.T) {
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	expectErrors := func(n int) {
		t.Helper()
		for range n {
			var e wire.Error
			p.Expect(wire.TypeError, &e)
			if e.RunID != f.RunID {
				t.Fatalf("error frame %+v, want one naming %s", e, f.RunID)
			}
		}
	}
	p.Accept(f.RunID)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"late","role":"assistant"}`)
	p.Finish(f.RunID)
	expectErrors(3)
	if r := h.Run(f.RunID); r.Status != run.InputRequired || len(h.Events(f.RunID)) != 2 {
		t.Fatalf("paused run after late reports: %s, %d events", r.Status, len(h.Events(f.RunID)))
	}
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	fs := finishResumed(t, h, p, s, f, "int1")
	stored := len(h.Events(f.RunID))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	expectErrors(2)
	if r := h.Run(f.RunID); r.Status != run.Completed || len(h.Events(f.RunID)) != stored {
		t.Fatalf("answered round reported twice: %s, %d events, want %d", r.Status, len(h.Events(f.RunID)), stored)
	}
	replay := openStream(t, "GET", startDoor(t, h, nil).URL+"/runs/"+f.RunID+"/events", "", map[string]string{"Last-Event-ID": "2"})
	if got, want := idsOf(replay.rest()), idsOf(fs); !slices.Equal(got, want) {
		t.Fatalf("replay of the answered round %v, the caller saw %v", got, want)
	}
	p.None()
}

// post sends one request bounded by guard, for goroutines (no t): the
// response is returned once its headers are in.
func post(url, body string) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, cancel, nil
}

// Two callers answer one pause at once, one at each door (design.md D1):
// exactly one reopens the run. An AG-UI loser gets the snapshot; an A2A
// loser's message is not lost but is a new task on the thread. The
// provider is offered the paused run once, and the loser's message (if
// the A2A caller lost) as a run of its own.
func TestAnswersFromBothDoorsAtOnce(t *testing.T) {
	h, p, url := echoDoor(t)
	a2aSrv := startA2A(t, h)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	runs := runCount(t, h)

	a2aBody, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": map[string]any{
		"message":       map[string]any{"messageId": "m-a2a", "role": "user", "kind": "message", "taskId": f.RunID, "parts": []any{map[string]any{"kind": "text", "text": "yes from A2A"}}},
		"configuration": map[string]any{"blocking": false}}})
	type answer struct {
		resp   *http.Response
		cancel context.CancelFunc
		err    error
	}
	start := make(chan struct{})
	var aguiAns, a2aAns answer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-start
		aguiAns.resp, aguiAns.cancel, aguiAns.err = post(url, resumeBody(*f.ThreadID, "a-agui", `[{"interruptId":"int1","status":"resolved"}]`))
	}()
	go func() {
		defer wg.Done()
		<-start
		a2aAns.resp, a2aAns.cancel, a2aAns.err = post(a2aSrv.URL+"/a2a/"+p.Key+"/echo", string(a2aBody))
	}()
	close(start)
	wg.Wait()
	for _, a := range []answer{aguiAns, a2aAns} {
		if a.err != nil {
			t.Fatal(a.err)
		}
		t.Cleanup(a.cancel)
		t.Cleanup(func() { a.resp.Body.Close() })
	}
	aguiWon := strings.HasPrefix(aguiAns.resp.Header.Get("Content-Type"), "text/event-stream")
	if !aguiWon {
		var snap map[string]any
		if err := json.NewDecoder(aguiAns.resp.Body).Decode(&snap); err != nil || aguiAns.resp.StatusCode != 200 || snap["thread_id"] != *f.ThreadID {
			t.Fatalf("the AG-UI loser: %d %v (%v)", aguiAns.resp.StatusCode, snap, err)
		}
	}
	var rpc struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.NewDecoder(a2aAns.resp.Body).Decode(&rpc); err != nil || rpc.Error != nil || rpc.Result == nil {
		t.Fatalf("the A2A answer: %v %v (%v)", rpc.Result, rpc.Error, err)
	}
	if a2aWon := rpc.Result["id"] == f.RunID; a2aWon == aguiWon {
		t.Fatalf("AG-UI reopened %v, A2A task %v (the paused run %s): want exactly one answer to reopen it", aguiWon, rpc.Result["id"], f.RunID)
	}
	if rpc.Result["contextId"] != *f.ThreadID {
		t.Fatalf("the A2A answer's task is on %v, want %s", rpc.Result["contextId"], *f.ThreadID)
	}
	want := 1 // the reopened run
	if aguiWon {
		want = 2 // and the A2A loser's new run
	}
	offered := map[string]int{}
	for range want {
		g := p.Offer()
		offered[g.RunID]++
		p.Accept(g.RunID)
		p.Complete(g.RunID, *f.ThreadID)
	}
	if offered[f.RunID] != 1 || aguiWon && offered[rpc.Result["id"].(string)] != 1 {
		t.Fatalf("offers %v: want %s once (and the loser's %v)", offered, f.RunID, rpc.Result["id"])
	}
	h.WaitStatus(f.RunID, run.Completed)
	if got := runCount(t, h); got != runs+want-1 {
		t.Fatalf("runs %d → %d", runs, got)
	}
	p.None()
}

// An answered run cancelled before its provider takes the answered round:
// the cancel waits on the offer (seed 004); the provider declines, so
// nobody holds it and it is cancelled. The caller's resume stream ends —
// with nothing after the question, as AG-UI has no cancelled event — and
// the run is not waiting any more.
func TestAnsweredRunCancelledBeforeItsRound(t *testing.T) {
	h, p, url := echoDoor(t)
	a2aSrv := startA2A(t, h)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	if g := p.Offer(); g.RunID != f.RunID {
		t.Fatalf("offered %s", g.RunID)
	}
	res, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": f.RunID})
	if md, _ := res["metadata"].(map[string]any); rpcErr != nil || md[a2a.CancelRequestedKey] != true {
		t.Fatalf("cancel of the answered run: %v %v", res, rpcErr)
	}
	p.Decline(f.RunID)
	if got := events(s.rest()); len(got) != 0 {
		t.Fatalf("the cancelled answer streamed %v", typesOf(t, got))
	}
	h.WaitStatus(f.RunID, run.Cancelled)
	_, _, snap := jsonCall(t, "GET", startDoor(t, h, nil).URL+"/threads/"+*f.ThreadID, "", nil)
	if snap["waiting_run"] != nil || snap["active_run"] != nil {
		t.Fatalf("snapshot after the cancel %v", snap)
	}
	p.None()
}

// An answered run cancelled while its offer is out, which the provider
// then takes: the cancel is passed on after the claim (seed 004), and the
// provider pauses again instead of stopping. The caller's resume stream
// ends on the new question and that question is answerable too.
func TestAnsweredRunCancelledThenPausedAgain(t *testing.T) {
	h, p, url := echoDoor(t)
	a2aSrv := startA2A(t, h)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	s := openStream(t, "POST", url, resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`), nil)
	p.Offer()
	if _, rpcErr := a2aCall(t, a2aSrv, p.Key, "echo", "tasks/cancel", map[string]any{"id": f.RunID}); rpcErr != nil {
		t.Fatalf("cancel of the answered run: %v", rpcErr)
	}
	p.Accept(f.RunID)
	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int2","reason":"sure?"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "RUN_FINISHED"}) {
		t.Fatalf("the cancelled answer's round %v", got)
	}
	h.WaitStatus(f.RunID, run.InputRequired)
	finishResumed(t, h, p, openStream(t, "POST", url, resumeBody(*f.ThreadID, "a2", `[{"interruptId":"int2","status":"resolved"}]`), nil), f, "int2")
	p.None()
}
