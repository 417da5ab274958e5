package a2a_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// ListTasks pages stay put when a task is added to the context between two
// pages: the next page starts after the last task the caller was shown, so
// no task is shown twice (the new one is newer than the cursor, so it
// belongs before page 1, not inside page 2).
func TestListTasksPagesSurviveANewTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe7, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	go func() {
		for range 4 {
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
		}
	}()
	t1 := c.send(c.message("P-1", "1", nil), nil)
	ctxID := t1["contextId"]
	t2 := c.send(c.message("P-2", "2", map[string]any{"contextId": ctxID}), nil)
	t3 := c.send(c.message("P-3", "3", map[string]any{"contextId": ctxID}), nil)
	pg := c.ok("ListTasks", map[string]any{"contextId": ctxID, "pageSize": 2})
	ids := taskIDs(pg)
	if len(ids) != 2 || ids[0] != t3["id"] || ids[1] != t2["id"] {
		t.Fatalf("page 1: %v", ids)
	}
	next, _ := pg["nextPageToken"].(string)
	if next == "" {
		t.Fatalf("page 1 has no next page: %v", pg)
	}
	c.send(c.message("P-4", "4", map[string]any{"contextId": ctxID}), nil)
	pg = c.ok("ListTasks", map[string]any{"contextId": ctxID, "pageSize": 2, "pageToken": next})
	if ids := taskIDs(pg); len(ids) != 1 || ids[0] != t1["id"] || pg["nextPageToken"] != "" {
		t.Fatalf("page 2 after a new task: %v (next %q), want only %v", ids, pg["nextPageToken"], t1["id"])
	}
}

// A pageToken the door did not issue is refused, and every token the door
// issues it takes back: a huge forged offset must not come back as a next
// page token the door then refuses.
func TestListTasksForgedTokenIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe8, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	t1 := c.send(c.message("F-1", "1", nil), nil)
	ctxID := t1["contextId"]
	for _, tok := range []string{"9223372036854775807", "-1", "x", "1e3"} {
		r := c.call("ListTasks", map[string]any{"contextId": ctxID, "pageToken": tok})
		if r.Error == nil {
			next, _ := r.Result["nextPageToken"].(string)
			if next == "" {
				continue
			}
			c.ok("ListTasks", map[string]any{"contextId": ctxID, "pageToken": next})
			continue
		}
		if r.Error.Code != a2a.CodeInvalidParams {
			t.Errorf("token %q: code %d, want %d", tok, r.Error.Code, a2a.CodeInvalidParams)
		}
	}
}

func taskIDs(pg map[string]any) []any {
	tasks, _ := pg["tasks"].([]any)
	var ids []any
	for _, x := range tasks {
		ids = append(ids, x.(map[string]any)["id"])
	}
	return ids
}
