// Package crowdtest holds, for the doors' tests of callers crowding one
// thread (D2, design.md §Doors under storage faults), the steps those tests
// share whichever door they go through: a provider storing a long burst of
// events on the thread's running run while the callers send, and the count
// of the runs left waiting on the thread.
package crowdtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// Burst has p take run runID of thread threadID, start an assistant
// message and store a long burst of its contents from a goroutine. It
// returns once the burst is under way (more than ten events stored: a
// barrier). stop ends the burst and waits for its goroutine; the test
// fails if the burst had already ended by then, since it was to overlap
// everything between Burst and stop.
func Burst(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, runID, threadID string) (stop func()) {
	t.Helper()
	p.Accept(runID)
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID))
	p.Event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	delta := strings.Repeat("x", 4000)
	go func() {
		defer close(done)
		for i := 0; i < 50000 && ctx.Err() == nil; i++ {
			p.Event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"`+delta+`"}`)
		}
	}()
	h.Eventually("the burst's events are being stored", func() bool {
		var n int
		err := h.Store.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM run_events WHERE run_id = $1`, runID).Scan(&n)
		return err == nil && n > 10
	})
	return func() {
		select {
		case <-done:
			t.Error("the burst ended before the callers' last round: it did not overlap them all")
		default:
		}
		cancel()
		<-done
	}
}

// Waiting counts the runs of thread threadID that wait for a provider:
// queued or offering.
func Waiting(t *testing.T, h *nodetest.Harness, threadID string) int {
	t.Helper()
	var n int
	if err := h.Store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM runs WHERE thread_id = $1 AND status IN ('queued', 'offering')`, threadID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
