package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Seed 000: "Every message is kept: … any other message becomes a new
// queued run on the thread — including one sent while a run is active,
// which waits its turn rather than being merged, refused, or dropped."
// From outside, on one context: while the head task's offer is out, a
// message on the context and one naming the head task (not paused, so no
// answer) each become a task of their own, submitted, offered nothing
// until the head is claimed (D2), then in arrival order, each carrying its
// own message alone; a message naming the head while it runs does the
// same and is offered at once. Each task's history holds its message.
func TestOutsideSeed000MessagesWhileATaskIsActiveAreEachKept(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	head := c.sendNoWait("k-1", "first", nil)
	headID, ctxID := head["id"].(string), head["contextId"].(string)
	fh := p.Offer()
	second := c.sendNoWait("k-2", "second", map[string]any{"contextId": ctxID})
	third := c.sendNoWait("k-3", "third", map[string]any{"taskId": headID})
	for _, tk := range []map[string]any{second, third} {
		if tk["id"] == headID || tk["contextId"] != ctxID || stateOf(tk) != "submitted" {
			t.Fatalf("a message while the head is offered was answered %v", tk)
		}
	}
	p.None() // they wait behind the unanswered head
	p.Accept(fh.RunID)
	p.Event(fh.RunID, runStarted(ctxID, fh.RunID))
	h.WaitStatus(headID, run.Running)
	fourth := c.sendNoWait("k-4", "fourth", map[string]any{"taskId": headID})
	for i, want := range []struct {
		task map[string]any
		text string
	}{{second, "second"}, {third, "third"}, {fourth, "fourth"}} {
		f := p.Offer()
		if f.RunID != want.task["id"] || *f.ThreadID != ctxID {
			t.Fatalf("offer %d is %s on %s, want %v (arrival order)", i, f.RunID, *f.ThreadID, want.task["id"])
		}
		var in struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 || in.Messages[0].Content != want.text {
			t.Fatalf("offer %d's input carries %+v (%v), want its own message %q alone", i, in.Messages, err, want.text)
		}
		p.Accept(f.RunID)
		p.Complete(f.RunID, ctxID)
		h.WaitStatus(f.RunID, run.Completed)
		g := c.ok("tasks/get", map[string]any{"id": f.RunID})
		if !historyHolds(g, want.text) {
			t.Fatalf("task %s's history does not hold %q: %v", f.RunID, want.text, g["history"])
		}
	}
	p.Complete(fh.RunID, ctxID)
	h.WaitStatus(headID, run.Completed)
	if g := c.ok("tasks/get", map[string]any{"id": headID}); !historyHolds(g, "first") || historyHolds(g, "third") {
		t.Fatalf("the head's history %v: a later message was merged into it", g["history"])
	}
}

// historyHolds reports whether task's history has a message whose text is
// text.
func historyHolds(task map[string]any, text string) bool {
	hist, _ := task["history"].([]any)
	for _, m := range hist {
		mm, _ := m.(map[string]any)
		parts, _ := mm["parts"].([]any)
		for _, p := range parts {
			if pp, _ := p.(map[string]any); pp["text"] == text {
				return true
			}
		}
	}
	return false
}

// Seed 000: "one whose taskId names the thread's paused input-required
// task is the answer to its question and resumes that run". With no
// per-thread gate (D2) a context may hold two paused tasks; a message
// naming the older one resumes that one, same id, and leaves the newer
// paused.
func TestOutsideSeed000AnswerNamesTheOlderOfTwoPausedTasks(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	go func() { pause(p, p.Offer()) }()
	older := c.send(c.message("o-1", "may I?", nil), nil)
	ctxID := older["contextId"].(string)
	go func() { pause(p, p.Offer()) }()
	newer := c.send(c.message("o-2", "and may I?", map[string]any{"contextId": ctxID}), nil)
	if stateOf(older) != "input-required" || stateOf(newer) != "input-required" || older["id"] == newer["id"] {
		t.Fatalf("paused tasks %v and %v", older, newer)
	}
	done := completeOffer(p)
	answered := c.send(c.message("o-3", "yes", map[string]any{"taskId": older["id"]}), nil)
	if f := <-done; f.RunID != older["id"] {
		t.Fatalf("offered %s, want the older paused task %v resumed", f.RunID, older["id"])
	}
	if answered["id"] != older["id"] || stateOf(answered) != "completed" {
		t.Fatalf("the answer was answered %v", answered)
	}
	c.wantTask("the newer paused task", newer["id"].(string), "input-required", false)
}

// Seed 000: "an unknown contextId is refused rather than replaced". From
// outside: free-form or shaped like a context funduq mints, on
// message/send and message/stream, a send naming an unknown context is
// refused and writes nothing — no thread, no task, nothing offered.
func TestOutsideSeed000UnknownContextIsRefusedAndWritesNothing(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	runs, threads := count(t, h, "runs"), count(t, h, "threads")
	for i, ctxID := range []string{"my-own-context", run.NewThreadID()} {
		c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message(fmt.Sprint("u-", i), "hi", map[string]any{"contextId": ctxID})})
		c.code(a2a.CodeInvalidParams, "message/stream", map[string]any{"message": c.message(fmt.Sprint("us-", i), "hi", map[string]any{"contextId": ctxID})})
	}
	if count(t, h, "runs") != runs || count(t, h, "threads") != threads {
		t.Fatal("a refused send wrote a thread or a task")
	}
	onlyFrames(t, p, "")
}

// Seed 000: tasks/cancel "raises TaskNotCancelableError on a task that has
// already ended" — whichever way it ended: failed (its agent unserved at
// intake, D8) as well as completed or cancelled.
func TestOutsideSeed000CancelOfAFailedTaskIsNotCancelable(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	p.Close()
	h.Eventually("the agent is unserved", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		return err == nil && len(as) == 1 && !as[0].Online
	})
	task := c.sendNoWait("f-1", "hi", nil)
	h.WaitStatus(task["id"].(string), run.Failed)
	c.code(a2a.CodeTaskNotCancelable, "tasks/cancel", map[string]any{"id": task["id"]})
	if r := h.Run(task["id"].(string)); r.Status != run.Failed || r.CancelRequestedBy != nil {
		t.Fatalf("after the refused cancel: %+v", r)
	}
}

// Seed 000: "referenceTaskIds records lineage", and nothing of which id
// when a message lists several. The door weighed the first id alone, so a
// message opening a context that listed an id it cannot use first
// (unknown) and its own earlier task second recorded no lineage. The
// first id the caller may read is the parent (docs/design.md §The doors).
func TestOutsideSeed000LineageFromTheFirstReadableReference(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	done := completeOffer(p)
	first := c.send(c.message("lr-1", "one", nil), nil)
	<-done
	done = completeOffer(p)
	second := c.send(c.message("lr-2", "two", map[string]any{"referenceTaskIds": []string{run.NewRunID(), first["id"].(string)}}), nil)
	<-done
	var parent string
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT coalesce(parent_thread_id, '') FROM threads WHERE thread_id = $1`,
		second["contextId"]).Scan(&parent); err != nil || parent != first["contextId"] {
		t.Fatalf("parent thread %q (%v), want %v: the first reference the caller may read", parent, err, first["contextId"])
	}
}

// Seed 000: only a message whose taskId names the paused task answers it;
// "any other message becomes a new queued run on the thread". From
// outside: a message on a context whose task is paused, naming no task,
// is a new task carrying its own message alone, and the paused task stays
// paused with its ask open.
func TestOutsideSeed000MessageNamingNoTaskIsNoAnswer(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, c := echoAgent(t, h, nil)
	go func() { pause(p, p.Offer()) }()
	paused := c.send(c.message("n-1", "may I?", nil), nil)
	ctxID := paused["contextId"].(string)
	done := completeOffer(p)
	other := c.send(c.message("n-2", "something else", map[string]any{"contextId": ctxID}), nil)
	f := <-done
	if other["id"] == paused["id"] || f.RunID != other["id"] || stateOf(other) != "completed" {
		t.Fatalf("the message naming no task was answered %v (offered %s)", other, f.RunID)
	}
	var in struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 || in.Messages[0].Content != "something else" {
		t.Fatalf("its input carries %+v (%v)", in.Messages, err)
	}
	c.wantTask("the paused task", paused["id"].(string), "input-required", false)
}
