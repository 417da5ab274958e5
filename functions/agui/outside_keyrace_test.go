package agui_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/agui"
)

// Retries of one request racing each other into the insert — the same
// body with the same Idempotency-Key opening a thread, or the same runId
// on a thread — make exactly one run, and each attempt streams it (D13,
// D17). The race is made certain: every attempt's insert waits behind a
// lock on thread_messages (written after the run's row), so all of them
// are inside their transaction before the first commits.
func TestOutsideRetriesOfOneTurnRacingMakeOneRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		on   bool // on an existing thread, named by the body
	}{
		{"Idempotency-Key opening a thread", map[string]string{agui.IdempotencyHeader: "turn-1"}, false},
		{"runId on a thread", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			url := aguiURL(startDoor(t, h, nil), p.Key, "echo")
			thread := "mine"
			if tc.on {
				thread = doneThread(t, h, p, url)
			}
			body := input(thread, "r-race", "")
			runs := runCount(t, h)

			const n = 3 // within the test door's pool (4 connections)
			release := h.Hold(`LOCK TABLE thread_messages IN EXCLUSIVE MODE`)
			opened := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					resp, cancel := do(t, "POST", url, body, tc.hdr)
					defer cancel()
					defer resp.Body.Close()
					line, _ := readLine(resp.Body)
					opened[i] = resp.Status + " " + line
				})
			}
			h.Eventually("every attempt waits inside its insert", func() bool { return lockWaiters(t, h) >= n })
			release()
			wg.Wait()
			for i, o := range opened {
				if !strings.HasPrefix(o, "200 OK : funduq run run_") || o != opened[0] {
					t.Errorf("attempt %d opened %q; attempt 0 %q: want one run's stream for all", i, o, opened[0])
				}
			}
			if got := runCount(t, h); got != runs+1 {
				t.Fatalf("%d runs made for one request", got-runs)
			}
		})
	}
}
