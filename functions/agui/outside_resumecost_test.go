package agui_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/internal/pgwatch"
	"github.com/funduq/funduq-go/internal/testservers"
)

// earlierReads are the calls among calls that read run runID's stored
// events from before seq after: what a resume's reopening reads (the
// events up to its Last-Event-ID, from the run's first), never the tail,
// which reads after the point it streams from.
func earlierReads(calls []pgwatch.Call, runID string, after int) []pgwatch.Call {
	var got []pgwatch.Call
	for _, c := range calls {
		if !strings.Contains(strings.Join(strings.Fields(c.SQL), " "), "FROM run_events WHERE run_id = $1 AND seq > $2 AND seq <= $3") || len(c.Args) < 2 || c.Args[0] != runID {
			continue
		}
		if from, ok := c.Args[1].(int); ok && from < after {
			got = append(got, c)
		}
	}
	return got
}

// Only a resume pays for its reopening (design.md §The doors, "A resume
// from inside a message"): the answer to a paused run streams its new
// round after the paused round's last event without reading that round
// again — no event of it can be open, its RUN_FINISHED closed them all —
// and neither does the answer retried (its Idempotency-Key) without a
// Last-Event-ID. The paused round here holds many events, so an answer
// that read them again would cost pages of reads per answer.
func TestOutsideAnswerStreamReadsNoEarlierRound(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, _ := watchedDoor(t, h)
	url := aguiURL(srv, p.Key, "echo")

	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
	for i := range 20 {
		p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"%d "}`, i))
	}
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval"}]}}`,
		*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.InputRequired)
	paused := h.Run(f.RunID).LastSeq

	mark := w.Len()
	body := resumeBody(*f.ThreadID, "a1", `[{"interruptId":"int1","status":"resolved"}]`)
	idem := map[string]string{agui.IdempotencyHeader: "answer-1"}
	ans := openStream(t, "POST", url, body, idem)
	finishResumed(t, h, p, ans, f, "int1")
	h.WaitStatus(f.RunID, run.Completed)
	if got := earlierReads(w.Since(mark), f.RunID, paused); len(got) > 0 {
		t.Errorf("the answer's stream read the paused round again (after %d): %v", paused, got)
	}

	mark = w.Len()
	openStream(t, "POST", url, body, idem).rest()
	if got := earlierReads(w.Since(mark), f.RunID, paused); len(got) > 0 {
		t.Errorf("the answer retried without Last-Event-ID read the paused round again (after %d): %v", paused, got)
	}
}

// A Last-Event-ID that names no event a resume can reopen anything for —
// past the run's last stored seq, or at the last event of a run that has
// ended (nothing can follow it) — is answered as before (no event on an
// ended run) without reading the run's events up to it: a client cannot
// make the door read a run whole for nothing (design.md §The doors, "A
// resume from inside a message").
func TestOutsideResumeBeyondTheEndReadsNothingBefore(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, _ := watchedDoor(t, h)
	s, f := takenRun(t, p, srv)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"x"}`)
	// The provider's stream ends inside its message, without a
	// RUN_FINISHED: the run's last stored event leaves a1 open.
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.Failed)
	last := h.Run(f.RunID).LastSeq
	for _, at := range []string{strconv.Itoa(last), strconv.Itoa(last + 1), "2147483647", "999999999999999999"} {
		mark := w.Len()
		fs := r2(t, srv, f.RunID, at)
		n, _ := strconv.Atoi(at)
		if got := earlierReads(w.Since(mark), f.RunID, min(n, last+1)); len(got) > 0 {
			t.Errorf("Last-Event-ID %s (last seq %d): read the run's events again: %v", at, last, got)
		}
		for _, fr := range events(fs) {
			if fr.ID == "" && !strings.Contains(fr.Data, `"RUN_STARTED"`) && !strings.Contains(fr.Data, `"RUN_ERROR"`) {
				t.Errorf("Last-Event-ID %s (last seq %d): reopened %s with nothing after it", at, last, fr.Data)
			}
		}
	}
}

// A resume whose reading of the events before its Last-Event-ID meets a
// hung PostgreSQL (frozen at that read) retries it as the tail retries the
// record, and when its storage give-up or the stream's time comes first
// ends typed: its
// RUN_STARTED, then funduq.stream_ended naming the same Last-Event-ID to
// resume from — never an event after the id without the opening it needs
// (a half-opened stream the client refuses), nor a stream that hangs past
// its budget (design.md §Doors under storage faults).
func TestOutsideResumeWhoseOpeningReadHangsEndsTyped(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	deps := mustDeps(t, h, "")
	deps.Store.Close()
	var w *pgwatch.Watch
	var px *testservers.Proxy
	deps.Store, w, px = pgwatch.OpenStore(t, h.Cfg.Storage.DatabaseURL, 4)
	srv := startDoorWith(t, deps, func(o *agui.Options) { o.StreamBudget = 3 * time.Second })
	s, f := takenRun(t, p, srv)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"one"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"two"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)

	frozen := make(chan struct{})
	var once sync.Once
	w.OnStart(func(sql string) {
		if strings.Contains(strings.Join(strings.Fields(sql), " "), "FROM run_events WHERE run_id = $1 AND seq > $2 AND seq <= $3") {
			once.Do(func() { px.Freeze(); close(frozen) })
		}
	})
	fs := events(r2(t, srv, f.RunID, "3"))
	<-frozen
	types := typesOf(t, fs)
	if len(fs) != 2 || types[0] != "RUN_STARTED" || fs[0].ID != "" ||
		!strings.Contains(fs[1].Data, `"name":"funduq.stream_ended","value":{"lastEventId":"3",`) {
		t.Fatalf("resume after 3 with its opening read hung: %+v", fs)
	}
}

// A provider that opens many large things and never closes them (here 24
// text messages whose TEXT_MESSAGE_START carries 100 KiB each) costs a
// resume inside them a bounded amount of memory: the door holds at most
// about a page's worth of opening events at once while it reads the run
// (design.md §The doors, "A resume from inside a message"), and still
// sends every opening again, as stored and in order. Its streams carry
// megabytes: each is bounded by slowGuard, not guard, and the door's step
// bound is pinned (startPinnedDoor), since a starved machine relays and
// reads them slower than either, and a stream cut short by the test's
// hang detector or a resume that gave up on its slow reads is not what
// this counts.
func TestOutsideResumeInsideManyLargeOpensHoldsBoundedMemory(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startPinnedDoor(t, h, nil)
	s, f := takenRunWithin(t, slowGuard, p, srv)
	p.Event(f.RunID, runStartedFor(f))
	big := strings.Repeat("x", 100<<10)
	const n = 24
	for i := range n {
		p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":"m%d","role":"assistant","name":%q}`, i, big))
	}
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m0","delta":"x"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	sent := map[string]string{}
	for _, fr := range events(openStreamWithin(t, slowGuard, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", nil).rest()) {
		sent[fr.ID] = fr.Data
	}

	var peak atomic.Int64
	defer agui.SetReopenHeld(func(b int) { peak.Store(max(peak.Load(), int64(b))) })()
	at := n + 2 // the TEXT_MESSAGE_CONTENT
	fs := events(openStreamWithin(t, slowGuard, "GET", srv.URL+"/runs/"+f.RunID+"/events", "",
		map[string]string{agui.LastEventIDHeader: strconv.Itoa(at)}).rest())
	if len(fs) != n+2 || fs[0].ID != "" || fs[n+1].ID != strconv.Itoa(at+1) {
		t.Fatalf("resume after %d: %d events, want RUN_STARTED, %d openings, RUN_FINISHED", at, len(fs), n)
	}
	for i := range n {
		if fs[1+i].ID != "" || fs[1+i].Data != sent[strconv.Itoa(2+i)] {
			t.Fatalf("opening %d: id %q, %.80s…; want seq %d's event without an id", i, fs[1+i].ID, fs[1+i].Data, 2+i)
		}
	}
	if limit := int64(agui.ReopenHeldBudget + len(big) + 1024); peak.Load() > limit {
		t.Errorf("the resume held %d bytes of opening events at once; want at most %d", peak.Load(), limit)
	}
}
