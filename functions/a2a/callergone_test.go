package a2a_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A caller that hangs up while its send waits in PostgreSQL is no fault
// of funduq's: the door's log says the caller went away, at INFO, and
// holds no ERROR and no internal error for it — the lines an operator
// alerts on. The task it did not wait for is not written.
func TestCallerGoneMidRequestIsNotAnInternalError(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	logs := &syncbuf.Buffer{}
	c := newClient(t, startDoor(t, h, func(o *a2a.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}), p.Key, "echo", "")
	got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
	opened := c.send(c.message("m0", "hi", nil), nil)
	recv(t, got, "the first task")
	ctxID, _ := opened["contextId"].(string)
	runs := count(t, h, "runs")

	// The next message on the context waits for its thread's row, held
	// here...
	release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, ctxID)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := c.body("message/send", map[string]any{"message": c.message("m1", "again", map[string]any{"contextId": ctxID})})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	h.Eventually("the send waits for the thread's row", func() bool {
		var n int
		_ = h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0
	})
	// ... and its caller hangs up.
	cancel()
	<-done
	var line map[string]any
	h.Eventually("the door logs the request's end", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["path"] == req.URL.Path {
				line = m
				return true
			}
		}
		return false
	})
	if line["level"] != "INFO" || line["msg"] != "caller went away" {
		t.Errorf("the request's log line %v, want INFO \"caller went away\"", line)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "internal error") || strings.Contains(l, "unavailable") {
			t.Errorf("logged as funduq's fault: %s", l)
		}
	}
	if n := count(t, h, "runs"); n != runs {
		t.Errorf("%d runs written for a send whose caller left before it was admitted", n-runs)
	}
}
