package a2a_test

import (
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// Retries of one answer racing each other — the same message, with the
// same Idempotency-Key or only the same messageId — are one request
// (D13): each is answered with the task the first of them reopened, and
// nothing else is made (no new task of the repeated message). Every
// attempt waits on the paused task's row, held, before any reopens it.
func TestOutsideRetriesOfOneAnswerRacingGetTheTask(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"Idempotency-Key", map[string]string{a2a.IdempotencyHeader: "answer-1"}},
		{"messageId", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("odd")
			c := newClient(t, startDoor(t, h, nil), p.Key, "odd", "")
			got := playNext(p, func(r, th string) []string {
				return []string{runStarted(th, r),
					fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"a1","reason":"confirm"}]}}`, th, r)}
			})
			c.send(c.message("m1", "start", nil), nil)
			id := recv(t, got, "the first round").RunID
			h.WaitStatus(id, run.InputRequired)
			runs := count(t, h, "runs")

			body := c.body("message/send", map[string]any{"message": c.message("m2", "yes", map[string]any{"taskId": id}),
				"configuration": map[string]any{"blocking": false}})
			answers := sendRacing(t, h, c, body, tc.hdr, "on the paused task's row",
				`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
			for i, a := range answers {
				if a.Error != nil || a.Result["id"] != id {
					t.Errorf("attempt %d was answered %+v %v, want task %s", i, a.Error, a.Result, id)
				}
			}
			if got := count(t, h, "runs"); got != runs {
				t.Fatalf("runs %d→%d for one answer", runs, got)
			}
		})
	}
}
