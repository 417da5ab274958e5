package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
)

// The Lambda entry answers GET /threads/{id} with cursors as the server
// door does, byte for byte: a ?limit=3 walk back to the oldest message
// (every message once, in order), and every bad cursor — another thread's,
// tampered, std-base64, padded, empty, repeated (API Gateway's multi-value
// form) — the same refusal.
func TestLambdaCursorAnswersAsTheServerDoor(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	handler, closeFn, err := newHandler(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	thread := func() string {
		runID, threadID := h.Door(p.Key, "echo", "", "hi")
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(runID, threadID)
		h.WaitStatus(runID, run.Completed)
		if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
			SELECT $1, $2, 'm-' || i, json_build_object('id', 'm-' || i, 'role', 'user', 'content', 'x'), 'caller'
			FROM generate_series(1, 8) i ORDER BY i`, threadID, runID); err != nil {
			t.Fatal(err)
		}
		return threadID
	}
	mine, theirs := thread(), thread()

	// both asks the Lambda entry (the query as API Gateway's multi-value
	// parameters) and the same handler as a server door serves it.
	both := func(id string, q url.Values) (int, string) {
		t.Helper()
		req := get("/threads/"+id, nil)
		req.MultiValueQueryStringParameters = q
		code, hdr, body := invoke(t, handler, time.Now().Add(time.Minute), req)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/threads/"+id+"?"+q.Encode(), nil))
		direct, _ := io.ReadAll(rec.Result().Body)
		if rec.Code != code || string(direct) != body || rec.Header().Get("Content-Type") != hdr["Content-Type"] {
			t.Fatalf("%s?%s: Lambda %d %v %s; server door %d %v %s", id, q.Encode(), code, hdr, body, rec.Code, rec.Header(), direct)
		}
		return code, body
	}
	type page struct {
		Messages   []struct{ ID string }
		HasMore    bool   `json:"has_more"`
		NextBefore string `json:"next_before"`
	}
	read := func(id string, q url.Values) page {
		t.Helper()
		code, body := both(id, q)
		var pg page
		if err := json.Unmarshal([]byte(body), &pg); code != 200 || err != nil {
			t.Fatalf("%s?%s: %d %s", id, q.Encode(), code, body)
		}
		return pg
	}
	var got []string
	q := url.Values{"limit": {"3"}}
	var first string
	for range 10 {
		pg := read(mine, q)
		var ids []string
		for _, m := range pg.Messages {
			ids = append(ids, m.ID)
		}
		got = append(ids, got...)
		if !pg.HasMore {
			break
		}
		if first == "" {
			first = pg.NextBefore
		}
		q = url.Values{"limit": {"3"}, "before": {pg.NextBefore}}
	}
	var want []string
	if err := h.DB().QueryRow(context.Background(), `SELECT array_agg(message->>'id' ORDER BY id) FROM thread_messages WHERE thread_id = $1`,
		mine).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the Lambda walk read %v, the thread holds %v", got, want)
	}

	foreign := read(theirs, url.Values{"limit": {"3"}}).NextBefore
	// One character of the cursor changed (not the last, whose low bits
	// are padding).
	tampered := []byte(first)
	if tampered[3] = 'A'; first[3] == 'A' {
		tampered[3] = 'B'
	}
	for _, before := range [][]string{{foreign}, {string(tampered)}, {strings.NewReplacer("-", "+", "_", "/").Replace(first) + "=="},
		{first + "=="}, {""}, {first, first}, {strings.Repeat("A", 22)}, {strings.Repeat("A", 5000)}} {
		if code, body := both(mine, url.Values{"before": before}); code != 400 || !strings.Contains(body, `"bad_request"`) {
			t.Fatalf("before=%.40q: %d %s", before, code, body)
		}
	}
	// A stranger's unknown id, cursor or not: 404 from both.
	if code, _ := both("thread_000000000000000000000000", url.Values{"before": {first}}); code != 404 {
		t.Fatalf("an unknown id with a cursor: %d", code)
	}
}
