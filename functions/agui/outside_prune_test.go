package agui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/agui"
)

// waitsOn reports whether a connection whose application_name matches
// app (a LIKE pattern) waits on a lock in a statement containing sql.
func waitsOn(h *nodetest.Harness, app, sql string) bool {
	var n int
	_ = h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE $1
		AND wait_event_type = 'Lock' AND query LIKE '%' || $2 || '%'`, app, sql).Scan(&n)
	return n > 0
}

// Retention deleting a settled thread while a caller's next turn on it is
// being admitted: the door read the thread before the prune committed and
// its write of the run finds the thread gone. The caller must get what a
// caller posting a moment later gets, a run on a new thread (an id funduq
// does not know is never adopted, design.md §The doors), and not a 500.
func TestPruneRacingANewTurnOnItsThread(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	url := aguiURL(startDoor(t, h, nil), p.Key, "echo")
	_, thread, _ := h.CompletedRun(p, "echo", "old")

	// The thread row is held; the prune's delete queues on it, the door's
	// update of it behind the prune (row lock waiters go in order), and
	// the hold is let go: the prune commits between the door's read of
	// the thread and its write.
	release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, thread)
	pruned := make(chan error, 1)
	go func() {
		_, err := h.Store.PruneBatch(context.Background(), time.Now().Add(time.Hour), 100)
		pruned <- err
	}()
	h.Eventually("the prune waits on the thread", func() bool { return waitsOn(h, "%", "DELETE FROM threads") })
	type answer struct {
		status int
		ctype  string
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(input(thread, "r-racing", "")))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
		if !strings.HasPrefix(a.ctype, "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			a.body = string(b)
		}
		answered <- a
	}()
	h.Eventually("the door's write waits behind the prune", func() bool {
		return waitsOn(h, "funduq-door", "UPDATE threads SET last_activity_at")
	})
	release()
	if err := <-pruned; err != nil {
		t.Fatalf("prune: %v", err)
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("the racing turn: %v", a.err)
	}
	later := openStream(t, "POST", url, input(thread, "r-later", ""), nil)
	later.close()
	if a.status != http.StatusOK || !strings.HasPrefix(a.ctype, "text/event-stream") {
		t.Fatalf("the turn racing the prune: %d %s %s; a turn after it streams a run on a new thread", a.status, a.ctype, a.body)
	}
}

// A caller reading a settled run's events (GET …/events, Last-Event-ID)
// while retention deletes that run: the door found the run, then its read
// of the record finds nothing. The stream must end with a typed end
// saying the run is unknown, as a request a moment later is told (404
// run_not_found), not keep the caller waiting on keep-alives for a run
// that no longer exists.
func TestPruneWhileACallerReadsTheRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	// The record stays locked until the test has deleted the run: the
	// stream's reads must not give up on storage meanwhile.
	srv := startDoor(t, h, func(o *agui.Options) { o.StorageGiveUp = time.Minute })
	runID, thread, _ := h.CompletedRun(p, "echo", "old")

	// The record is locked while the door reads it; what retention
	// deletes for the run is deleted under that lock and committed once
	// the door's read waits on it.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	s := openStream(t, "GET", srv.URL+"/runs/"+runID+"/events", "", map[string]string{agui.LastEventIDHeader: "1"})
	h.Eventually("the stream's read waits on the record", func() bool { return waitsOn(h, "funduq-door", "run_events") })
	for _, q := range []string{
		`DELETE FROM run_events WHERE run_id = $1`,
		`DELETE FROM thread_messages WHERE run_id = $1`,
		`DELETE FROM answer_requests WHERE run_id = $1`,
		`DELETE FROM runs WHERE run_id = $1`,
	} {
		if _, err := tx.Exec(ctx, q, runID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM threads WHERE thread_id = $1`, thread); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	evs := events(s.rest())
	if len(evs) == 0 {
		t.Fatal("the stream ended without an event saying why")
	}
	if first := evs[0].event(t); first["type"] != "RUN_STARTED" {
		t.Errorf("the stream's first event %v, want RUN_STARTED (every stream opens with one)", first)
	}
	last := evs[len(evs)-1].event(t)
	if last["type"] != "RUN_ERROR" || last["code"] != "run_not_found" {
		t.Fatalf("the stream's last event %v, want RUN_ERROR run_not_found", last)
	}
	if code, _, _ := jsonCall(t, "GET", srv.URL+"/runs/"+runID+"/events", "", nil); code != http.StatusNotFound {
		t.Fatalf("a read after the prune: %d, want 404", code)
	}
}
