package a2a_test

import (
	"context"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Retries of one send racing each other into the insert — the same
// message with the same Idempotency-Key opening a context, or the same
// messageId on a context — make exactly one task, and each attempt is
// answered with it (D13, D17). Every attempt's insert waits behind a lock
// on thread_messages (written after the task's row), so all of them are
// inside their transaction before the first commits.
func TestOutsideRetriesOfOneSendRacingMakeOneTask(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		on   bool // on a context the first send opened
	}{
		{"Idempotency-Key opening a context", map[string]string{a2a.IdempotencyHeader: "send-1"}, false},
		{"messageId on a context", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
			extra := map[string]any(nil)
			if tc.on {
				first := c.ok("message/send", map[string]any{"message": c.message("m0", "hi", nil),
					"configuration": map[string]any{"blocking": false}})
				extra = map[string]any{"contextId": first["contextId"]}
			}
			body := c.body("message/send", map[string]any{"message": c.message("m1", "again", extra),
				"configuration": map[string]any{"blocking": false}})
			runs := count(t, h, "runs")

			answers := sendRacing(t, h, c, body, tc.hdr, "inside its insert", `LOCK TABLE thread_messages IN EXCLUSIVE MODE`)
			for i, a := range answers {
				if a.Error != nil || a.Result["id"] == nil || a.Result["id"] != answers[0].Result["id"] {
					t.Errorf("attempt %d was answered %+v %v; attempt 0 task %v: want one task for all", i, a.Error, a.Result["id"], answers[0].Result["id"])
				}
			}
			if got := count(t, h, "runs"); got != runs+1 {
				t.Fatalf("%d tasks made for one send", got-runs)
			}
		})
	}
}

// sendRacing sends body three times at once (within the test door's pool
// of 4 connections) while hold, run on a connection of its own, holds a
// lock every attempt then waits on (where), lets them all go together once
// each waits, and returns their answers in order.
func sendRacing(t *testing.T, h *nodetest.Harness, c *client, body string, hdr map[string]string, where, hold string, args ...any) []rpcResp {
	t.Helper()
	const n = 3
	release := h.Hold(hold, args...)
	answers := make([]rpcResp, n)
	failed := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i], failed[i] = c.tryRawCall(body, hdr) })
	}
	h.Eventually("every attempt waits "+where, func() bool {
		var waiting int
		err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting >= n
	})
	release()
	wg.Wait()
	for i, err := range failed {
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	return answers
}
