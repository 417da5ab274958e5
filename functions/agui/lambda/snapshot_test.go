package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
)

// Through the Lambda entry, GET /threads/{id} of a thread holding 12 MiB
// of messages answers within the 6 MB a Lambda function may return: the
// newest page, then each older one by ?before= (the query string as API
// Gateway hands it over), every message once. (On main: one 12 MiB
// answer, which Lambda refuses to return.)
func TestLambdaLongThreadSnapshotFitsAResponse(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	handler, closeFn, err := newHandler(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	runID, threadID := h.Door(p.Key, "echo", "", "hi")
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(runID, threadID)
	h.WaitStatus(runID, run.Completed)
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, $2, 'long-' || i, json_build_object('id', 'long-' || i, 'role', 'user', 'content', repeat('x', 1 << 20)), 'caller'
		FROM generate_series(1, 12) i ORDER BY i`, threadID, runID); err != nil {
		t.Fatal(err)
	}

	var got []string
	before, pages := "", 0
	for {
		req := get("/threads/"+threadID, nil)
		if before != "" {
			req.QueryStringParameters = map[string]string{"before": before}
		}
		code, hdr, body := invoke(t, handler, time.Now().Add(time.Minute), req)
		if code != 200 || len(body) > 6_000_000 {
			t.Fatalf("page %d: %d %v, %d bytes", pages+1, code, hdr, len(body))
		}
		var snap struct {
			Messages   []struct{ ID string }
			HasMore    bool   `json:"has_more"`
			NextBefore string `json:"next_before"`
		}
		if err := json.Unmarshal([]byte(body), &snap); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range snap.Messages {
			ids = append(ids, m.ID)
		}
		got = append(ids, got...)
		pages++
		if !snap.HasMore {
			break
		}
		if pages > 20 {
			t.Fatalf("no end after %d pages", pages)
		}
		before = snap.NextBefore
	}
	var want []string
	if err := h.DB().QueryRow(context.Background(), `SELECT array_agg(message->>'id' ORDER BY id) FROM thread_messages WHERE thread_id = $1`,
		threadID).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if pages < 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages read %v, the thread holds %v", pages, got, want)
	}
}
