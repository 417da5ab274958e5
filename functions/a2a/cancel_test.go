package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

func marker(task map[string]any) bool {
	md, _ := task["metadata"].(map[string]any)
	return md[a2a.CancelRequestedKey] == true
}

// Cancel of a running task: working plus the pending marker on the answer
// itself; the provider is asked; the task reads working (marked) until the
// provider ends the run, and only then canceled. A finished task is not
// cancelable.
func TestCancelRunning(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("c-1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	h.WaitStatus(f.RunID, run.Running)

	got := c.ok("tasks/cancel", map[string]any{"id": task["id"]})
	if stateOf(got) != "working" || !marker(got) {
		t.Fatalf("cancel answer %v", got)
	}
	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	if cf.RunID != f.RunID {
		t.Fatalf("cancel frame %+v", cf)
	}
	h.WaitStatus(f.RunID, run.Cancelling)
	if g := c.ok("tasks/get", map[string]any{"id": task["id"]}); stateOf(g) != "working" || !marker(g) {
		t.Fatalf("while the provider works: %v", g)
	}
	p.Finish(f.RunID) // the provider stops without RUN_FINISHED
	h.WaitStatus(f.RunID, run.Cancelled)
	if g := c.ok("tasks/get", map[string]any{"id": task["id"]}); stateOf(g) != "canceled" {
		t.Fatalf("after the provider finished: %v", g)
	}
	r := c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": task["id"]})
	_ = r
}

// A queued task is cancelled at once by the broker (nobody holds it); the
// answer is submitted plus the marker.
func TestCancelQueued(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	task := c.send(c.message("c-1", "hi", nil), map[string]any{"configuration": map[string]any{"returnImmediately": true}})
	f := p.Offer() // offering: the provider has not answered
	got := c.ok("CancelTask", map[string]any{"id": task["id"]})
	if s := stateOf(got); (s != "TASK_STATE_SUBMITTED" && s != "TASK_STATE_WORKING") || !marker(got) {
		t.Fatalf("cancel answer %v", got)
	}
	p.Decline(f.RunID)
	h.WaitStatus(f.RunID, run.Cancelled)
}

// pause makes the provider end the run's round on a question.
func pause(p *nodetest.Prov, f wire.RunFrame) {
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ask-1","reason":"approval","message":"May I?"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
}

// A message naming the context's input-required task answers it: the same
// run (same task id) is reopened and offered again with the answer; a
// paused task is not cancelable (D1); a message naming a task that is no
// longer paused becomes a new queued task on the context (the race's loser).
func TestAnswerResumesSameTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("ask")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "ask", "")
	go func() { pause(p, p.Offer()) }()
	task := c.send(c.message("a-1", "may I?", nil), nil)
	id, ctxID := task["id"].(string), task["contextId"].(string)
	md, _ := task["metadata"].(map[string]any)
	if stateOf(task) != "input-required" || md[a2a.InterruptKey] == nil {
		t.Fatalf("paused task %v", task)
	}
	c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": id})

	done := completeOffer(p)
	answered := c.send(c.message("a-2", "yes", map[string]any{"taskId": id}), nil)
	f := <-done
	if answered["id"] != id || f.RunID != id || stateOf(answered) != "completed" || answered["contextId"] != ctxID {
		t.Fatalf("answer: task %v, offered %s", answered, f.RunID)
	}
	var in struct {
		ParentRunID *string           `json:"parentRunId"`
		Messages    []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || in.ParentRunID == nil || *in.ParentRunID != id ||
		len(in.Messages) != 1 || !strings.Contains(string(in.Messages[0]), `"content":"yes"`) {
		t.Fatalf("the answer's input %s", f.RunInput)
	}
	if hist, _ := answered["history"].([]any); len(hist) != 3 {
		t.Errorf("history %v", answered["history"])
	}
	// A retry of the answer (same messageId) is the same task; nothing new.
	retried := c.send(c.message("a-2", "yes", map[string]any{"taskId": id}), nil)
	if retried["id"] != id {
		t.Fatalf("a retried answer made task %v, want %s", retried["id"], id)
	}
	// Naming the (now completed) task again is an ordinary new task.
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	late := c.send(c.message("a-3", "also yes", map[string]any{"taskId": id}), nil)
	if late["id"] == id || late["contextId"] != ctxID || stateOf(late) != "completed" {
		t.Fatalf("late answer %v", late)
	}
}

// On a thread bound to an authority, a cancel needs a proof by the segment
// head or the agent's provider, checked before the task's state is said.
func TestCancelProofOnBoundThread(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	head := signer(t, 0xc1)
	id := c.sendBound(head, "b-1")
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(id, run.Completed)
	proof := func(s *identity.Signer, ts int64) map[string]any { return cancelProof(s, id, ts) }
	now := time.Now().Unix()
	// No proof, a stranger's, a stale one: to a caller who is no party the
	// task is unknown (D16); to a party (the head's view proof) the refusal
	// says why, without a word about the task's state (it has ended).
	for _, md := range []map[string]any{nil, proof(signer(t, 0xc9), now), proof(head, now-3600)} {
		c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": id, "metadata": md})
		body := c.body("tasks/cancel", map[string]any{"id": id, "metadata": md})
		r := c.rawCall(body, map[string]string{door.ViewHeader: identity.MakeViewHeader(head, id, now)})
		if r.Error == nil || r.Error.Code != a2a.CodeInvalidCancel || strings.Contains(r.Error.Message, "ended") {
			t.Errorf("a party's bad cancel: %+v", r.Error)
		}
	}
	// The head's proof passes the check and meets the state: ended.
	c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": id, "metadata": proof(head, now)})
}

// referenceTaskIds: the first referenced task the caller may read parents
// the new thread (lineage only).
func TestReferenceTaskLineage(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	go func() {
		for range 2 {
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
		}
	}()
	first := c.send(c.message("l-1", "one", nil), nil)
	second := c.send(c.message("l-2", "two", map[string]any{"referenceTaskIds": []string{first["id"].(string)}}), nil)
	var parent string
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT coalesce(parent_thread_id, '') FROM threads WHERE thread_id = $1`,
		second["contextId"]).Scan(&parent); err != nil || parent != first["contextId"] {
		t.Fatalf("parent thread %q (%v), want %v", parent, err, first["contextId"])
	}
}

// An interjection declaration naming the context's running task reaches the
// provider as forwardedProps.funduq.addressedRunId; naming anything else is
// refused with -32602 and writes nothing.
func TestInterjectionDeclaration(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	task := c.send(c.message("i-1", "long job", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
	f := p.Offer()
	p.Accept(f.RunID)
	h.WaitStatus(f.RunID, run.Running)
	ctxID := task["contextId"].(string)
	runs := count(t, h, "runs")
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("i-2", "x", map[string]any{"contextId": ctxID}),
		"metadata": map[string]any{a2a.AddressedRunIDKey: "run_000000000000000000000000"}})
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("i-3", "x", map[string]any{"contextId": ctxID}),
		"metadata": map[string]any{a2a.AddressedRunIDKey: 7}})
	if count(t, h, "runs") != runs {
		t.Fatal("a refused declaration wrote a run")
	}
	inter := c.send(c.message("i-4", "also this", map[string]any{"contextId": ctxID}),
		map[string]any{"metadata": map[string]any{a2a.AddressedRunIDKey: f.RunID}, "configuration": map[string]any{"blocking": false}})
	f2 := p.Offer()
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				AddressedRunID string `json:"addressedRunId"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if err := json.Unmarshal(f2.RunInput, &in); err != nil || f2.RunID != inter["id"] || in.ForwardedProps.Funduq.AddressedRunID != f.RunID {
		t.Fatalf("interjection delivered as %s", f2.RunInput)
	}
	// The row names its target beside the input: the broker reads the
	// column, not the input (a run without it would not be addressed).
	if r, err := h.Store.GetRun(context.Background(), f2.RunID); err != nil || r.AddressedRunID != f.RunID {
		t.Fatalf("interjection's row names %q (%v), want %s", r.AddressedRunID, err, f.RunID)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, ctxID)
	p.Complete(f.RunID, ctxID)
	h.WaitStatus(f.RunID, run.Completed)
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("i-5", "x", map[string]any{"contextId": ctxID}),
		"metadata": map[string]any{a2a.AddressedRunIDKey: f.RunID}})
}

// ListTasks: a context's tasks, newest first, paged; no contextId is an
// empty page; status filter and includeArtifacts honoured.
func TestListTasks(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	go func() {
		for range 3 {
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
		}
	}()
	t1 := c.send(c.message("L-1", "1", nil), nil)
	ctxID := t1["contextId"]
	t2 := c.send(c.message("L-2", "2", map[string]any{"contextId": ctxID}), nil)
	t3 := c.send(c.message("L-3", "3", map[string]any{"contextId": ctxID}), nil)
	empty := c.ok("ListTasks", map[string]any{})
	if tasks, _ := empty["tasks"].([]any); len(tasks) != 0 || empty["nextPageToken"] != "" {
		t.Errorf("no contextId: %v", empty)
	}
	pg := c.ok("ListTasks", map[string]any{"contextId": ctxID, "pageSize": 2})
	tasks, _ := pg["tasks"].([]any)
	if len(tasks) != 2 || tasks[0].(map[string]any)["id"] != t3["id"] || tasks[1].(map[string]any)["id"] != t2["id"] ||
		pg["nextPageToken"] == "" || pg["totalSize"] != float64(3) || tasks[0].(map[string]any)["artifacts"] != nil {
		t.Fatalf("page 1: %v", pg)
	}
	pg = c.ok("ListTasks", map[string]any{"contextId": ctxID, "pageSize": 2, "pageToken": pg["nextPageToken"], "includeArtifacts": true})
	tasks, _ = pg["tasks"].([]any)
	if len(tasks) != 1 || tasks[0].(map[string]any)["id"] != t1["id"] || pg["nextPageToken"] != "" || tasks[0].(map[string]any)["artifacts"] == nil {
		t.Fatalf("page 2: %v", pg)
	}
	if pg := c.ok("ListTasks", map[string]any{"contextId": ctxID, "status": "TASK_STATE_WORKING"}); pg["totalSize"] != float64(0) {
		t.Errorf("status filter: %v", pg)
	}
	c.code(a2a.CodeInvalidParams, "ListTasks", map[string]any{"contextId": ctxID, "pageToken": "x"})
}
