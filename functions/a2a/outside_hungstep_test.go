package a2a_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/pgwatch"
	"github.com/funduq/funduq-go/internal/testservers"
)

// watchedDoor serves an A2A door whose PostgreSQL connections pass through
// a proxy the test may freeze, its storage calls recorded.
func watchedDoor(t *testing.T, h *nodetest.Harness) (*httptest.Server, *pgwatch.Watch, *testservers.Proxy) {
	t.Helper()
	return watchedDoorWith(t, h, nil)
}

// watchedDoorWith is watchedDoor with the door's options changed by mut.
func watchedDoorWith(t *testing.T, h *nodetest.Harness, mut func(*a2a.Options)) (*httptest.Server, *pgwatch.Watch, *testservers.Proxy) {
	t.Helper()
	deps := doorDeps(t, h)
	deps.Store.Close()
	var w *pgwatch.Watch
	var px *testservers.Proxy
	deps.Store, w, px = pgwatch.OpenStore(t, h.Cfg.Storage.DatabaseURL, 4)
	srv := startDoorWith(t, deps, mut)
	return srv, w, px
}

// A message/send that meets a hung PostgreSQL (connections open and
// pooled, never answered again) is answered 503 with Retry-After and
// JSON-RPC -32043 when the bound of the one step that met it expires
// (D13, design.md §Doors under storage faults), whichever step it is: the
// context's read, its first, or the task's write after steps that
// answered. Each step has its own door.StorageTimeout within what is left
// of the request's budget, so the step that meets the hang cannot spend
// the budget of the steps after it — it used to, and the send answered
// after three bounds. Not timed: every storage call made for the request
// had a deadline at most one bound after it started, and the request was
// answered with one call alone ended by its deadline, the frozen one.
func TestOutsideSendMeetingAHungStorageWaitsOneBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(sql string) bool
	}{
		{"reading the context", func(sql string) bool {
			return !strings.HasPrefix(sql, "BEGIN") && strings.Contains(sql, "FROM threads WHERE thread_id")
		}},
		{"writing the task", func(sql string) bool { return strings.HasPrefix(sql, "BEGIN") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv, w, px := watchedDoor(t, h)
			c := newClient(t, srv, p.Key, "echo", "")
			// A context, made while storage answers.
			nonBlocking := map[string]any{"configuration": map[string]any{"blocking": false}}
			c.send(c.message("m0", "first", nil), nonBlocking)
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
			h.WaitStatus(f.RunID, run.Completed)

			mark := w.Len()
			w.OnStart(func(sql string) {
				if tc.at(sql) {
					px.Freeze()
				}
			})
			body := c.body("message/send", map[string]any{"message": c.message("m1", "again", map[string]any{"contextId": *f.ThreadID}),
				"configuration": map[string]any{"blocking": false}})
			resp, cancel := c.post(body, nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			var r rpcResp
			if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
				resp.Header.Get("Retry-After") == "" || r.Error == nil || r.Error.Code != a2a.CodeUnavailable {
				t.Fatalf("answered %d Retry-After %q: %s; want 503 with Retry-After and error %d", resp.StatusCode, resp.Header.Get("Retry-After"), b, a2a.CodeUnavailable)
			}
			pgwatch.CheckOneBoundSpent(t, w.Since(mark), door.StorageTimeout, tc.at)
		})
	}
}

// Every storage call an A2A door makes while answering — a blocking send
// followed to its end, a streamed send, a task read, a cancel, a
// resubscription, a context's task list — has a deadline at most
// door.StorageTimeout after it starts (design.md §Doors under storage
// faults): none is given what is left of its request's whole budget, nor
// no deadline at all.
func TestOutsideEveryStorageCallIsOneStep(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, _ := watchedDoor(t, h)
	c := newClient(t, srv, p.Key, "echo", "")

	done := make(chan struct{})
	go func() {
		defer close(done)
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}()
	first := c.send(c.message("m0", "first", nil), nil)
	<-done
	ctxID, _ := first["contextId"].(string)
	on := map[string]any{"contextId": ctxID}

	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("m1", "second", on)}), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	c.ok("tasks/get", map[string]any{"id": f.RunID})

	third := c.send(c.message("m2", "third", on), map[string]any{"configuration": map[string]any{"blocking": false}})
	f = p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	h.WaitStatus(f.RunID, run.Running)
	c.ok("tasks/cancel", map[string]any{"id": third["id"]})
	sub := c.stream(c.body("tasks/resubscribe", map[string]any{"id": third["id"]}), nil)
	p.Finish(f.RunID)
	sub.rest()
	h.WaitStatus(f.RunID, run.Cancelled)

	newClient(t, srv, p.Key, "echo", "1.0").ok("ListTasks", map[string]any{"contextId": ctxID})

	calls := w.Since(0)
	pgwatch.CheckBounded(t, calls, door.StorageTimeout)
	t.Logf("%d storage calls", len(calls))
}
