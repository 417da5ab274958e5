package agui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/pgwatch"
	"github.com/funduq/funduq-go/internal/testservers"
)

// watchedDoor serves an AG-UI door whose PostgreSQL connections pass
// through a proxy the test may freeze, its storage calls recorded.
func watchedDoor(t *testing.T, h *nodetest.Harness) (*httptest.Server, *pgwatch.Watch, *testservers.Proxy) {
	t.Helper()
	deps := mustDeps(t, h, "")
	deps.Store.Close()
	var w *pgwatch.Watch
	var px *testservers.Proxy
	deps.Store, w, px = pgwatch.OpenStore(t, h.Cfg.Storage.DatabaseURL, 4)
	srv := startDoorWith(t, deps, nil)
	return srv, w, px
}

// An AG-UI request that meets a hung PostgreSQL (connections open and
// pooled, never answered again) is answered 503 storage_unavailable with
// Retry-After when the bound of the one step that met it expires (D13,
// design.md §Doors under storage faults), whichever step it is: a POST's
// read of its thread or its insert after steps that answered, a thread
// snapshot's read of the messages after the thread's. Each step has its
// own door.StorageTimeout within what is left of the request's budget, so
// the step that meets the hang cannot spend the budget of the steps after
// it — it used to, and a POST answered after two bounds. Not timed: every
// storage call made for the request had a deadline at most one bound after
// it started, and the request was answered with one call alone ended by
// its deadline, the frozen one.
func TestOutsideRequestMeetingAHungStorageWaitsOneBound(t *testing.T) {
	readsThread := func(sql string) bool {
		return !strings.HasPrefix(sql, "BEGIN") && strings.Contains(sql, "FROM threads WHERE thread_id")
	}
	for _, tc := range []struct {
		name string
		get  bool // the thread's snapshot, else a POST on the thread
		at   func(sql string) bool
	}{
		{"a POST reading its thread", false, readsThread},
		{"a POST writing its run", false, func(sql string) bool { return strings.HasPrefix(sql, "BEGIN") }},
		{"a snapshot reading the messages", true, func(sql string) bool { return strings.Contains(sql, "FROM thread_messages") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv, w, px := watchedDoor(t, h)
			url := aguiURL(srv, p.Key, "echo")
			thread := doneThread(t, h, p, url)

			mark := w.Len()
			w.OnStart(func(sql string) {
				if tc.at(sql) {
					px.Freeze()
				}
			})
			method, target, body := http.MethodPost, url, input(thread, "r1", "")
			if tc.get {
				method, target, body = http.MethodGet, srv.URL+"/threads/"+thread, ""
			}
			status, hdr, m := jsonCall(t, method, target, body, nil)
			e, _ := m["error"].(map[string]any)
			if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || e["code"] != door.CodeUnavailable {
				t.Fatalf("answered %d Retry-After %q: %v; want 503 %s with Retry-After", status, hdr.Get("Retry-After"), m, door.CodeUnavailable)
			}
			calls := w.Since(mark)
			pgwatch.CheckOneBoundSpent(t, calls, door.StorageTimeout, tc.at)
		})
	}
}

// Every storage call an AG-UI door makes while answering — a new thread's
// run streamed to its end, a next turn on it, its snapshot, a run's events
// read again, the agents' list — has a deadline at most
// door.StorageTimeout after it starts (design.md §Doors under storage
// faults): none is given what is left of its request's whole budget, nor
// no deadline at all.
func TestOutsideEveryStorageCallIsOneStep(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, _ := watchedDoor(t, h)
	url := aguiURL(srv, p.Key, "echo")
	thread := doneThread(t, h, p, url)

	s := openStream(t, http.MethodPost, url, input(thread, "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	for _, path := range []string{"/threads/" + thread, "/agents"} {
		if status, _, m := jsonCall(t, http.MethodGet, srv.URL+path, "", nil); status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, status, m)
		}
	}
	openStream(t, http.MethodGet, srv.URL+"/runs/"+f.RunID+"/events", "", nil).rest()

	calls := w.Since(0)
	pgwatch.CheckBounded(t, calls, door.StorageTimeout)
	t.Logf("%d storage calls", len(calls))
}
