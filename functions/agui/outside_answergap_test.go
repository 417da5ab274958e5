package agui_test

import (
	"io"
	"strings"
	"sync"
	"testing"

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
			a := pauseForAnswer(t, "ans-gap")
			url, f, body := a.url, a.f, a.body
			inGap, goOn := holdFirstInGap(t) // the retry; the first attempt passes

			var retried string
			var wg sync.WaitGroup
			wg.Go(func() { retried = answered(t, url, body, tc.hdr) })
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
			a.finishReopened(t)
		})
	}
}

// Another caller sending the same answer under the same Idempotency-Key
// in that gap is not handed the first caller's round: keys belong to
// their caller (D17), so its look-up again finds nothing of its own and
// it is told, with the thread's snapshot, that its answer did not land.
func TestOutsideOtherCallersAnswerInTheGapIsNotTheFirstsRound(t *testing.T) {
	a := pauseForAnswer(t, "ans-gap")
	url, f, body := a.url, a.f, a.body
	hdrA, hdrB := presenterHdr(signer(t, 0xc1), body), presenterHdr(signer(t, 0xc9), body)
	hdrA[agui.IdempotencyHeader], hdrB[agui.IdempotencyHeader] = "answer-gap", "answer-gap"
	inGap, goOn := holdFirstInGap(t) // caller B; caller A passes

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
	a.finishReopened(t)
}

// holdFirstInGap holds the first request to reach the gap after its
// retry look-up (the door's test barrier) until the test closes goOn;
// inGap is closed when it is there. Later requests pass.
func holdFirstInGap(t *testing.T) (inGap, goOn chan struct{}) {
	inGap, goOn = make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(agui.SetAfterRetryLookup(func() {
		held := false
		once.Do(func() { held = true })
		if held {
			close(inGap)
			<-goOn
		}
	}))
	return inGap, goOn
}
