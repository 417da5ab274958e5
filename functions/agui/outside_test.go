package agui_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
)

// The AG-UI door seen from outside: providers that speak the raw wire v4
// (nodetest.Prov: the real ticket and hello/welcome handshake over
// gorilla/websocket, not our SDK) and behave as a stranger's code may, and
// callers that are not each other.

// sendSeq sends one event frame carrying the provider's own seq (D7's
// extension).
func sendSeq(p *nodetest.Prov, runID string, seq int64, ev string) {
	p.Send(wire.Event{Type: wire.TypeEvent, RunID: runID, Event: json.RawMessage(ev), ProviderSeq: &seq})
}

// A provider that numbers its events from 0 (the wire gives seq no
// origin) has every event stored and relayed: its first one is not taken
// for a resend of an event nobody sent.
func TestOutsideProviderSeqFromZero(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	evs := []string{
		runStartedFor(f),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID),
	}
	for i, ev := range evs {
		sendSeq(p, f.RunID, int64(i), ev)
	}
	p.Finish(f.RunID)
	fs := s.rest()
	if got, want := typesOf(t, fs), []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
		t.Fatalf("the caller saw %v, want %v", got, want)
	}
	if got := idsOf(fs); !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("ids %v: the provider's own RUN_STARTED was not stored", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	if n := len(h.Events(f.RunID)); n != len(evs) {
		t.Fatalf("%d events stored, want %d", n, len(evs))
	}
}

// A provider whose seqs do not grow in the order it sends (1, 3, 2, …)
// loses none of its events: a seq is a resend guard matched exactly
// (design.md D7), so each event the store does not hold is stored, in
// arrival order, and the caller sees every one.
func TestOutsideProviderSeqsOutOfOrder(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	evs := []struct {
		seq int64
		ev  string
	}{
		{1, runStartedFor(f)},
		{3, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`},
		{2, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`},
		{2, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`}, // a resend
		{5, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`},
		{4, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID)},
	}
	for _, e := range evs {
		sendSeq(p, f.RunID, e.seq, e.ev)
	}
	p.Finish(f.RunID)
	fs := s.rest()
	if got, want := typesOf(t, fs), []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
		t.Fatalf("the caller saw %v, want %v", got, want)
	}
	h.WaitStatus(f.RunID, run.Completed)
	if n := len(h.Events(f.RunID)); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
}

// oddRound is a round a stranger's provider may send: text chunks with no
// TEXT_MESSAGE_START, two messages interleaved, a state snapshot, an event
// type funduq does not know, and a resend (a repeated provider seq) —
// every one legal AG-UI. It returns the frames' provider seqs, resends
// included, in the order sent.
func oddRound(f wire.RunFrame, end string) []struct {
	seq int64
	ev  string
} {
	type ev = struct {
		seq int64
		ev  string
	}
	return []ev{
		{1, runStartedFor(f)},
		{2, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"c1","role":"assistant","delta":"Hel"}`},
		{3, `{"type":"TEXT_MESSAGE_CHUNK","delta":"lo"}`},
		{3, `{"type":"TEXT_MESSAGE_CHUNK","delta":"lo"}`}, // resent
		{4, `{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`},
		{5, `{"type":"TEXT_MESSAGE_START","messageId":"m3","role":"assistant"}`},
		{6, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m3","delta":"three"}`},
		{7, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m2","delta":"two"}`},
		{8, `{"type":"TEXT_MESSAGE_END","messageId":"m2"}`},
		{9, `{"type":"TEXT_MESSAGE_END","messageId":"m3"}`},
		{10, `{"type":"STATE_SNAPSHOT","snapshot":{"step":1}}`},
		{11, `{"type":"X_VENDOR_PROGRESS","pct":50}`},
		{12, end},
	}
}

// liveRound sends round's events one at a time; after the caller's stream
// s shows each, it opens a stream of the run at that event's id on door
// other, as a client dropping there would. It returns the stored ids s
// saw and the reconnected streams by the id they resumed after.
func liveRound(t *testing.T, p *nodetest.Prov, runID string, s *stream, other string, round []struct {
	seq int64
	ev  string
}) ([]string, map[string]*stream) {
	t.Helper()
	var ids []string
	resumed := map[string]*stream{}
	for i, e := range round {
		sendSeq(p, runID, e.seq, e.ev)
		if i > 0 && round[i-1].seq == e.seq {
			continue // a resend: nothing new to see
		}
		fr, ok := s.nextEvent()
		for ok && fr.ID == "" { // a synthesized RUN_STARTED
			fr, ok = s.nextEvent()
		}
		if !ok {
			t.Fatalf("the stream ended after %v", ids)
		}
		ids = append(ids, fr.ID)
		resumed[fr.ID] = openStream(t, "GET", other+"/runs/"+runID+"/events", "", map[string]string{agui.LastEventIDHeader: fr.ID})
	}
	p.Finish(runID)
	return ids, resumed
}

// seqRange is the ids from..to.
func seqRange(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// storedIDs are the ids of fs' stored events (synthesized ones left out),
// and whether the stream opened with a RUN_STARTED.
func storedIDs(t *testing.T, fs []frame) ([]string, bool) {
	t.Helper()
	var out []string
	evs := events(fs)
	for _, f := range evs {
		if f.ID != "" {
			out = append(out, f.ID)
		}
	}
	return out, len(evs) == 0 || evs[0].event(t)["type"] == "RUN_STARTED"
}

// reopenedBy lists the events without ids a resumed stream sends right
// after its first one (a RUN_STARTED), as "TYPE id" (messageId,
// toolCallId, stepName or subagentRunId), and fails if one comes after a
// stored event: what the stream reopens (design.md §The doors, "A resume
// from inside a message").
func reopenedBy(t *testing.T, fs []frame) []string {
	t.Helper()
	var out []string
	evs := events(fs)
	for i, f := range evs {
		if i == 0 || f.ID != "" {
			continue
		}
		e := f.event(t)
		if i > len(out)+1 {
			if e["type"] == "CUSTOM" || e["type"] == "RUN_ERROR" {
				continue // a stream's end (stream.go)
			}
			t.Fatalf("event without id after stored ones: %s", f.Data)
		}
		id := ""
		for _, k := range []string{"messageId", "toolCallId", "stepName", "subagentRunId"} {
			if v, ok := e[k].(string); ok && id == "" {
				id = v
			}
		}
		out = append(out, fmt.Sprint(e["type"], " ", id))
	}
	return out
}

// Resuming at every seq (D9): a run of two rounds (a pause, then its
// answer) from a provider sending odd but legal orders. A client dropping
// after any event and reconnecting to another door with Last-Event-ID —
// while the run is live, and after it ended — gets every later event of
// that round once, in order, opened by a RUN_STARTED (and, inside a
// message, that message's TEXT_MESSAGE_START again, without an id);
// reconnecting at a round's last event gets the next round once it exists
// (on the paused run it ends at once). The reply folds onto the thread
// as the chunks and interleaved messages said.
func TestOutsideResumeAtEverySeq(t *testing.T) {
	h, p, url := echoDoor(t)
	other := startDoor(t, h, nil).URL
	s := openStream(t, "POST", url, input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	pauseEnd := fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval","toolCallId":"tc1"}]}}`, *f.ThreadID, f.RunID)
	ids1, resumed1 := liveRound(t, p, f.RunID, s, other, oddRound(f, pauseEnd))
	if !slices.Equal(ids1, seqRange(1, 12)) {
		t.Fatalf("round 1 ids %v", ids1)
	}
	if rest := events(s.rest()); len(rest) != 0 {
		t.Fatalf("after the pause: %+v", rest)
	}
	h.WaitStatus(f.RunID, run.InputRequired)

	// The answer reopens the run; this provider numbers round 2 from 1
	// again (its own count per offer).
	body := fmt.Sprintf(`{"threadId":%q,"runId":"r2","messages":[],"tools":[],"context":[],"forwardedProps":{},%s}`, *f.ThreadID, resumeInt1)
	s2 := openStream(t, "POST", url, body, nil)
	if f2 := p.Offer(); f2.RunID != f.RunID {
		t.Fatalf("the answer opened %s", f2.RunID)
	}
	p.Accept(f.RunID)
	ids2, resumed2 := liveRound(t, p, f.RunID, s2, other, oddRound(f,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID)))
	if !slices.Equal(ids2, seqRange(13, 24)) {
		t.Fatalf("round 2 ids %v", ids2)
	}
	h.WaitStatus(f.RunID, run.Completed)

	check := func(when string, after int, fs []frame) {
		t.Helper()
		// A stream ends at its round's end; opened on the paused run (at
		// 12, live) it ends at once, and the answer's POST streams round 2.
		end := 12
		if after >= 12 && (when == "ended" || after > 12) {
			end = 24
		}
		got, started := storedIDs(t, fs)
		if want := seqRange(after+1, end); !slices.Equal(got, want) || !started {
			t.Fatalf("%s, resumed after %d: ids %v (opened by RUN_STARTED: %v), want %v", when, after, got, started, want)
		}
		// Resumed inside m2 (seq 4..8) or m3 (5..9), the RUN_STARTED is
		// followed by their TEXT_MESSAGE_STARTs, without ids (design.md
		// §The doors, "A resume from inside a message"), worked out by
		// hand from oddRound. The chunks open no message the door tracks.
		var want []string
		switch at := after % 12; {
		case at == 4:
			want = []string{"TEXT_MESSAGE_START m2"}
		case at >= 5 && at <= 7:
			want = []string{"TEXT_MESSAGE_START m2", "TEXT_MESSAGE_START m3"}
		case at == 8:
			want = []string{"TEXT_MESSAGE_START m3"}
		}
		if got := reopenedBy(t, fs); !slices.Equal(got, want) {
			t.Fatalf("%s, resumed after %d: reopened %q, want %q", when, after, got, want)
		}
	}
	for id, rs := range resumed1 {
		n, _ := strconv.Atoi(id)
		check("live", n, rs.rest())
	}
	for id, rs := range resumed2 {
		n, _ := strconv.Atoi(id)
		check("live", n, rs.rest())
	}
	third := startDoor(t, h, nil)
	for after := 0; after <= 24; after++ {
		check("ended", after, r2(t, third, f.RunID, strconv.Itoa(after)))
	}

	// The thread holds each round's reply as its events built it.
	code, _, snap := jsonCall(t, "GET", other+"/threads/"+*f.ThreadID, "", nil)
	if code != 200 {
		t.Fatalf("snapshot %d %v", code, snap)
	}
	texts := map[string]int{}
	for _, m := range snap["messages"].([]any) {
		mm := m.(map[string]any)
		if mm["role"] == "assistant" {
			texts[fmt.Sprint(mm["content"])]++
		}
	}
	if texts["Hello"] != 2 || texts["two"] != 2 || texts["three"] != 2 {
		t.Fatalf("assistant messages on the thread %v: %v", texts, snap["messages"])
	}
}

// A provider whose link drops mid-run without a close frame and that
// re-attaches within the link grace (D5), re-registers and resends from
// an event funduq already has: the caller's open stream shows every event
// once, in order, the run completes, and nothing counts against the key.
func TestOutsideReconnectWithinGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.Waits.LinkGrace = time.Hour }) // the fake clock never runs it out
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	s := openStream(t, "POST", aguiURL(startDoor(t, h, nil), p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	sendSeq(p, f.RunID, 1, runStartedFor(f))
	sendSeq(p, f.RunID, 2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	for _, want := range []string{"1", "2"} {
		if fr, ok := s.nextEvent(); !ok || fr.ID != want {
			t.Fatalf("event %+v, want id %s", fr, want)
		}
	}
	p.Close() // lost, not a goodbye

	p2 := h.Connect(0xe1, nil)
	p2.Register("echo")
	sendSeq(p2, f.RunID, 2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`) // resent
	sendSeq(p2, f.RunID, 3, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"back"}`)
	sendSeq(p2, f.RunID, 4, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	sendSeq(p2, f.RunID, 5, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p2.Finish(f.RunID)
	fs := s.rest()
	if got := idsOf(fs); !slices.Equal(got, []string{"3", "4", "5"}) {
		t.Fatalf("after the reconnect the caller saw ids %v", got)
	}
	if got := typesOf(t, fs); !slices.Equal(got, []string{"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("after the reconnect the caller saw %v", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	p2.None() // the reports were all taken: no error frame came
	if q := h.Quality(p.Key); q != (store.Quality{ProviderKey: p.Key}) {
		t.Fatalf("counted %+v", q)
	}
}

// Frames the relay must refuse are answered with an error frame naming
// the run (D15), never dropped in silence, and change nothing a caller
// sees: another provider reporting for the run, reports for a run that
// does not exist, a frame that is not JSON, and reports after the run
// ended.
func TestOutsideRefusedFramesAreAnswered(t *testing.T) {
	h, p, url := echoDoor(t)
	intruder := h.Connect(0xe2, nil)
	intruder.Register("else")
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	if fr, ok := s.nextEvent(); !ok || fr.ID != "1" {
		t.Fatalf("first event %+v", fr)
	}
	refused := func(who *nodetest.Prov, what, runID string, send func()) {
		t.Helper()
		send()
		var e wire.Error
		who.Expect(wire.TypeError, &e)
		if e.RunID != runID || e.Message == "" {
			t.Fatalf("%s: error frame %+v, want one naming %q", what, e, runID)
		}
	}
	const nope = "run_000000000000000000000000"
	refused(intruder, "another provider's event", f.RunID, func() {
		intruder.Event(f.RunID, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"x","delta":"injected"}`)
	})
	refused(intruder, "another provider's ack", f.RunID, func() { intruder.Accept(f.RunID) })
	refused(intruder, "another provider's finish", f.RunID, func() { intruder.Finish(f.RunID) })
	refused(p, "an event for no run", nope, func() { p.Event(nope, `{"type":"CUSTOM","name":"x","value":1}`) })
	refused(p, "a finish for no run", nope, func() { p.Finish(nope) })
	refused(p, "not JSON", "", func() { p.SendRaw(`{"type":"event","runId":`) })

	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	fs := s.rest()
	if got := typesOf(t, fs); !slices.Equal(got, []string{"TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("the caller saw %v", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	refused(p, "an event after the end", f.RunID, func() { p.Event(f.RunID, `{"type":"CUSTOM","name":"late","value":1}`) })
	refused(p, "a finish after the end", f.RunID, func() { p.Finish(f.RunID) })
	if got := typesOf(t, r2(t, startDoor(t, h, nil), f.RunID, "0")); !slices.Equal(got,
		[]string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("the record holds %v", got)
	}
	p.None()
	intruder.None()
	if q := h.Quality(intruder.Key); q != (store.Quality{ProviderKey: intruder.Key}) {
		t.Fatalf("the intruder counted %+v", q)
	}
}

// A provider that answers an offer after funduq stopped waiting
// (deliver_timeout): its late ack claims the run (the late-ack rule, D15),
// and the caller's stream, open all along, shows the round once. The lapse
// counts unanswered and the late claim answered_late, nothing else.
func TestOutsideOfferAnsweredLate(t *testing.T) {
	h, p, url := echoDoor(t)
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	h.Advance(h.Cfg.Waits.DeliverTimeout)
	h.WaitStatus(f.RunID, run.Queued)
	p.Accept(f.RunID)
	p.None() // taken: no error frame
	h.WaitStatus(f.RunID, run.Running)
	sendSeq(p, f.RunID, 1, runStartedFor(f))
	sendSeq(p, f.RunID, 2, `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"late"}`)
	sendSeq(p, f.RunID, 3, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	fs := s.rest()
	if got := idsOf(fs); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("ids %v", got)
	}
	h.WaitStatus(f.RunID, run.Completed)
	p.None()
	if q := h.Quality(p.Key); q != (store.Quality{ProviderKey: p.Key, Unanswered: 1, AnsweredLate: 1}) {
		t.Fatalf("counted %+v", q)
	}
}

// A Last-Event-ID past every seq a run can hold (seqs are 32-bit in the
// record) resumes after everything: on an ended run the stream ends at
// once with no event, as it does for the largest seq, instead of staying
// open on keep-alives for good.
func TestOutsideLastEventIDPastEverySeq(t *testing.T) {
	h, p, url := echoDoor(t)
	srv := startDoor(t, h, nil)
	s := openStream(t, "POST", url, input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	for _, last := range []string{"2147483647", "2147483648", "999999999999999999"} {
		if fs := r2(t, srv, f.RunID, last); len(events(fs)) != 0 {
			t.Fatalf("after %s: %+v", last, fs)
		}
	}
}
