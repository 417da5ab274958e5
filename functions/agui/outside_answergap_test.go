package agui_test

import (
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// A retry of an answer whose first attempt reopens the paused run after
// the retry's own look-up found nothing, but before the retry looks for
// the paused run, finds no run to answer: it was told with a thread
// snapshot that its answer had no ask to land on, though the answer was
// its own and landed (D13: a retry streams the round its request opened).
// The gap is held open by the door's test barrier: the retry waits there
// until the first attempt's stream has begun (its reopen committed).
func TestOutsideRetryOfAnswerLandingInTheGapStreamsItsRound(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"Idempotency-Key", map[string]string{agui.IdempotencyHeader: "answer-gap"}},
		{"runId", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, p, url := echoDoor(t)
			f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
			body := resumeBody(*f.ThreadID, "ans-gap", `[{"interruptId":"int1","status":"resolved"}]`)
			runs := runCount(t, h)

			inGap, goOn := make(chan struct{}), make(chan struct{})
			var once sync.Once
			restore := agui.SetAfterRetryLookup(func() {
				held := false
				once.Do(func() { held = true })
				if held { // the retry; the first attempt passes
					close(inGap)
					<-goOn
				}
			})
			defer restore()

			var retried string
			var wg sync.WaitGroup
			wg.Go(func() {
				resp, cancel := do(t, "POST", url, body, tc.hdr)
				defer cancel()
				defer resp.Body.Close()
				if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					line, _ := readLine(resp.Body)
					retried = "stream " + line
					return
				}
				b, _ := io.ReadAll(resp.Body)
				retried = resp.Status + " " + string(b)
			})
			<-inGap
			first := openStream(t, "POST", url, body, tc.hdr)
			if line, err := readLine(first.br); err != nil || line != ": funduq run "+f.RunID {
				t.Fatalf("first attempt: %q %v, want the stream of the reopened run", line, err)
			}
			close(goOn)
			wg.Wait()
			if retried != "stream : funduq run "+f.RunID {
				t.Errorf("the retry was answered %.200q, want the stream of the reopened run %s", retried, f.RunID)
			}
			if f2 := p.Offer(); f2.RunID != f.RunID {
				t.Fatalf("offered %s, want the paused run %s reopened", f2.RunID, f.RunID)
			}
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
			h.WaitStatus(f.RunID, run.Completed)
			p.None()
			if got := runCount(t, h); got != runs {
				t.Fatalf("runs %d→%d for one answer", runs, got)
			}
		})
	}
}

// Another caller sending the same answer under the same Idempotency-Key
// in that gap is not handed the first caller's round: keys belong to
// their caller (D17), so its look-up again finds nothing of its own and
// it is told, with the thread's snapshot, that its answer did not land.
func TestOutsideOtherCallersAnswerInTheGapIsNotTheFirstsRound(t *testing.T) {
	h, p, url := echoDoor(t)
	f := pauseOn(t, h, p, openStream(t, "POST", url, input("t", "r1", ""), nil), `[{"id":"int1","reason":"approval"}]`)
	body := resumeBody(*f.ThreadID, "ans-gap", `[{"interruptId":"int1","status":"resolved"}]`)
	hdrA, hdrB := presenterHdr(signer(t, 0xc1), body), presenterHdr(signer(t, 0xc9), body)
	hdrA[agui.IdempotencyHeader], hdrB[agui.IdempotencyHeader] = "answer-gap", "answer-gap"
	runs := runCount(t, h)

	inGap, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	restore := agui.SetAfterRetryLookup(func() {
		held := false
		once.Do(func() { held = true })
		if held { // caller B; caller A passes
			close(inGap)
			<-goOn
		}
	})
	defer restore()

	var status, ctype, got string
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, cancel := do(t, "POST", url, body, hdrB)
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		status, ctype, got = resp.Status, resp.Header.Get("Content-Type"), string(b)
	})
	<-inGap
	first := openStream(t, "POST", url, body, hdrA)
	if line, err := readLine(first.br); err != nil || line != ": funduq run "+f.RunID {
		t.Fatalf("caller A: %q %v, want the stream of the reopened run", line, err)
	}
	close(goOn)
	wg.Wait()
	if status != "200 OK" || !strings.HasPrefix(ctype, "application/json") || !strings.Contains(got, `"thread_id":"`+*f.ThreadID+`"`) {
		t.Errorf("caller B was answered %s %s %.200q, want the thread's snapshot", status, ctype, got)
	}
	if f2 := p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("offered %s, want the paused run %s reopened", f2.RunID, f.RunID)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
	p.None()
	if got := runCount(t, h); got != runs {
		t.Fatalf("runs %d→%d for one answer", runs, got)
	}
}
