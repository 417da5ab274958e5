package agui_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
)

// Retries of one answer racing each other — the same body, carrying the
// same Idempotency-Key or only the same runId — are one request (D13):
// each streams the round the first of them reopened, none is told with a
// thread snapshot that another answer landed first, and the provider is
// offered the round once. The race is made certain: every attempt waits
// on the paused run's row, held, before any of them reopens it.
func TestOutsideRetriesOfOneAnswerRacingStreamItsRound(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"Idempotency-Key", map[string]string{agui.IdempotencyHeader: "answer-1"}},
		{"runId", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := pauseForAnswer(t, "ans-1")
			h, url, f, body := a.h, a.url, a.f, a.body

			const n = 3 // within the test door's pool (4 connections)
			release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, f.RunID)
			answers := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { answers[i] = answered(t, url, body, tc.hdr) })
			}
			h.Eventually("every attempt waits on the paused run's row", func() bool { return lockWaiters(t, h) >= n })
			release()
			wg.Wait()
			for i, a := range answers {
				if a != "stream : funduq run "+f.RunID {
					t.Errorf("attempt %d was answered %.200q, want the stream of the reopened run %s", i, a, f.RunID)
				}
			}
			a.finishReopened(t)
		})
	}
}

// pausedAnswer is a thread of the echo door paused on an approval (f, its
// run's frame) with body, the answer to it, and runs, the runs stored
// before anyone answers.
type pausedAnswer struct {
	h    *nodetest.Harness
	p    *nodetest.Prov
	url  string
	f    wire.RunFrame
	body string
	runs int
}

// pauseForAnswer pauses a run of the echo door and writes the answer to
// it under the AG-UI run id answerID.
func pauseForAnswer(t *testing.T, answerID string) pausedAnswer {
	t.Helper()
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	return pausedAnswer{h: h, p: p, url: url, f: f,
		body: resumeBody(*f.ThreadID, answerID, `[{"interruptId":"int1","status":"resolved"}]`), runs: runCount(t, h)}
}

// finishReopened checks the provider is offered the paused run reopened
// and completes it, and that the answering made no run of its own.
func (a pausedAnswer) finishReopened(t *testing.T) {
	t.Helper()
	if f2 := a.p.Offer(); f2.RunID != a.f.RunID {
		t.Fatalf("offered %s, want the paused run %s reopened", f2.RunID, a.f.RunID)
	}
	a.p.Accept(a.f.RunID)
	a.p.Complete(a.f.RunID, *a.f.ThreadID)
	a.h.WaitStatus(a.f.RunID, run.Completed)
	a.p.None()
	if got := runCount(t, a.h); got != a.runs {
		t.Fatalf("runs %d→%d for one answer", a.runs, got)
	}
}

// answered posts body and says what it was answered: "stream " and the
// stream's first line, or the status and the body.
func answered(t *testing.T, url, body string, hdr map[string]string) string {
	resp, cancel := do(t, "POST", url, body, hdr)
	defer cancel()
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		line, _ := readLine(resp.Body)
		return "stream " + line
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b)
}

// readLine reads up to the first newline of r.
func readLine(r io.Reader) (string, error) {
	var sb strings.Builder
	b := make([]byte, 1)
	for {
		if _, err := r.Read(b); err != nil {
			return sb.String(), err
		}
		if b[0] == '\n' {
			return sb.String(), nil
		}
		sb.WriteByte(b[0])
	}
}

// lockWaiters counts the harness database's backends waiting on a lock.
func lockWaiters(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
