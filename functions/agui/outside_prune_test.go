package agui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
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
