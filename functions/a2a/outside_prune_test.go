package a2a_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// doorWaitsOn reports whether one of the door's connections waits on a
// lock in a statement containing sql.
func doorWaitsOn(h *nodetest.Harness, sql string) bool {
	var n int
	_ = h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'funduq-door'
		AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, sql).Scan(&n)
	return n > 0
}

// pruneWaits reports whether a connection other than the door's waits on
// a lock deleting threads (the prune's batch).
func pruneWaits(h *nodetest.Harness) bool {
	var n int
	_ = h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name <> 'funduq-door'
		AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM threads%'`).Scan(&n)
	return n > 0
}

// postRPC posts a JSON-RPC body from a goroutine (no t.Fatal there).
func postRPC(url, body string) (rpcResp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return rpcResp{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rpcResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return rpcResp{}, err
	}
	var r rpcResp
	err = json.Unmarshal(b, &r)
	r.Status = resp.StatusCode
	return r, err
}

// racePrune runs one retention batch (everything settled) while the
// door's request waits on a lock in a statement containing sql, so the
// prune commits after the door read the thread and before its write of
// it lands. The thread row is held first; the prune's delete queues on
// it, then the door's statement behind the prune (row lock waiters go in
// order), and the hold is let go.
func racePrune(t *testing.T, h *nodetest.Harness, c *client, threadID, sql, body string) rpcResp {
	t.Helper()
	release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, threadID)
	pruned := make(chan error, 1)
	go func() {
		_, err := h.Store.PruneBatch(context.Background(), time.Now().Add(time.Hour), 100)
		pruned <- err
	}()
	h.Eventually("the prune waits on the thread", func() bool { return pruneWaits(h) })
	type answer struct {
		r   rpcResp
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		r, err := postRPC(c.url, body)
		answered <- answer{r, err}
	}()
	h.Eventually("the door's write waits behind the prune", func() bool { return doorWaitsOn(h, sql) })
	release()
	if err := <-pruned; err != nil {
		t.Fatalf("prune: %v", err)
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("the racing send: %v", a.err)
	}
	return a.r
}

// Retention deleting a settled context while a caller's message on it is
// being admitted: the door read the context before the prune committed
// and its write of the run finds the context gone. The caller must be
// told what a caller sending a moment later is told, that the context is
// unknown, and not an internal error (design.md §The doors, D16).
func TestPruneRacingANewTurnOnItsContext(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	_, ctxID, _ := h.CompletedRun(p, "echo", "old")

	msg := func(id string) string {
		return c.body("message/send", map[string]any{"configuration": map[string]any{"blocking": false},
			"message": c.message(id, "still there?", map[string]any{"contextId": ctxID})})
	}
	racing := racePrune(t, h, c, ctxID, "UPDATE threads SET last_activity_at", msg("racing"))
	later := c.rawCall(msg("later"), nil)
	if later.Error == nil {
		t.Fatalf("a send on the pruned context was taken: %v", later.Result)
	}
	if racing.Error == nil || racing.Status != later.Status || racing.Error.Code != later.Error.Code {
		t.Fatalf("the send racing the prune: %d %+v; a send after it: %d %+v (the context is unknown to both alike)",
			racing.Status, racing.Error, later.Status, later.Error)
	}
}

// A message referencing a settled task (lineage, referenceTaskIds) while
// retention deletes that task's context: the door found the task, the
// prune committed, and the new context's parent is gone. The reference is
// then to an unknown task, which is ignored (design.md §The doors): the
// message is taken on a new context without a parent, as a moment later.
func TestPruneRacingAReferenceToItsTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	ref, refCtx, _ := h.CompletedRun(p, "echo", "old")

	msg := func(id string) string {
		return c.body("message/send", map[string]any{"configuration": map[string]any{"blocking": false},
			"message": c.message(id, "follow-up", map[string]any{"referenceTaskIds": []string{ref}})})
	}
	racing := racePrune(t, h, c, refCtx, "INSERT INTO threads", msg("racing"))
	later := c.rawCall(msg("later"), nil)
	for name, r := range map[string]rpcResp{"the send racing the prune": racing, "a send after it": later} {
		if r.Error != nil {
			t.Errorf("%s: refused %d %d %s (a reference to an unknown task is ignored)", name, r.Status, r.Error.Code, r.Error.Message)
			continue
		}
		ctx, _ := r.Result["contextId"].(string)
		var parent string
		if err := h.DB().QueryRow(context.Background(),
			`SELECT coalesce(parent_thread_id, '') FROM threads WHERE thread_id = $1`, ctx).Scan(&parent); err != nil {
			t.Fatalf("%s: its context %q: %v", name, ctx, err)
		}
		if parent != "" {
			t.Errorf("%s: its context's parent is %s, which retention deleted", name, parent)
		}
	}
}

// A caller streaming a settled task (its retried message/stream) while
// retention deletes it: the door found the task, then retention commits
// (here as the stream opens), and the stream's reads of the record find
// nothing. The stream must end with the error a request a moment later
// gets (task not found), not keep the caller waiting on keep-alives for a
// task that no longer exists.
func TestPruneWhileACallerStreamsTheTask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	pruned := make(chan error, 1)
	var streams atomic.Int32
	c := newClient(t, startDoor(t, h, func(o *a2a.Options) {
		a2a.BeforeSnapshot(o, func() {
			if streams.Add(1) != 2 {
				return // the first stream is the one that makes the task
			}
			_, err := h.Store.PruneBatch(context.Background(), time.Now().Add(time.Hour), 100)
			pruned <- err
		})
	}), p.Key, "echo", "")
	body := c.body("message/stream", map[string]any{"message": c.message("m-old", "old", nil)})
	first := c.stream(body, map[string]string{a2a.IdempotencyHeader: "old-1"})
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	first.rest()
	runID := f.RunID
	h.WaitStatus(runID, run.Completed)

	// The caller's retried stream (D13) streams the task it made, as it
	// stands.
	s := c.stream(body, map[string]string{a2a.IdempotencyHeader: "old-1", a2a.LastEventIDHeader: "1"})
	if err := <-pruned; err != nil {
		t.Fatalf("prune: %v", err)
	}
	items := s.rest()
	later := c.call("tasks/get", map[string]any{"id": runID})
	if later.Error == nil || later.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("tasks/get after the prune: %+v, want %d", later.Error, a2a.CodeTaskNotFound)
	}
	if len(items) == 0 {
		t.Fatal("the stream ended without an item")
	}
	last := items[len(items)-1].Resp
	if last.Error == nil || last.Error.Code != a2a.CodeTaskNotFound {
		t.Fatalf("the stream's items %v end with %+v, want the error %d (the task is unknown now)", kinds(items), last.Error, a2a.CodeTaskNotFound)
	}
}
