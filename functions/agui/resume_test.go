package agui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// pause runs a first round that ends asking: an interrupt (standing for tool
// call tc1) plus an announced tool call tc2 nobody answered.
func pause(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, s *stream) wire.RunFrame {
	t.Helper()
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TOOL_CALL_START","toolCallId":"tc2","toolCallName":"lookup"}`)
	p.Event(f.RunID, `{"type":"TOOL_CALL_END","toolCallId":"tc2"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int1","reason":"approval","toolCallId":"tc1"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	fs := s.rest()
	if got := typesOf(t, fs); !slices.Equal(got, []string{"RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_END", "RUN_FINISHED"}) {
		t.Fatalf("pausing round %v", got)
	}
	r := h.WaitStatus(f.RunID, run.InputRequired)
	if !strings.Contains(string(r.Interrupt), `"int1"`) {
		t.Fatalf("stored interrupt %s", r.Interrupt)
	}
	return f
}

const (
	resumeInt1 = `"resume":[{"interruptId":"int1","status":"resolved","payload":{"approved":true}}]`
	toolTC2    = `{"id":"x","role":"tool","toolCallId":"tc2","content":"42"}`
)

func answerBody(threadID, runID string) string {
	return fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[%s],"tools":[],"context":[],"forwardedProps":{},%s}`,
		threadID, runID, toolTC2, resumeInt1)
}

// The snapshot shows the waiting run and its asks; a partial answer, or a
// resume naming no open interrupt, gets the snapshot and writes nothing; a
// complete answer reopens the same run id (parentRunId = that id) and its
// stream continues the run's seq.
func TestPauseAndResume(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f := pause(t, h, p, s)
	thread := *f.ThreadID

	code, _, snap := jsonCall(t, "GET", srv.URL+"/threads/"+thread, "", nil)
	waiting, _ := snap["waiting_run"].(map[string]any)
	if code != 200 || snap["thread_id"] != thread || snap["active_run"] != nil || waiting == nil ||
		waiting["run_id"] != f.RunID || fmt.Sprint(waiting["outstanding_asks"]) != "[tc1 tc2]" {
		t.Fatalf("snapshot %d %v", code, snap)
	}
	runs := runCount(t, h)

	// Partial: the interrupt only, tc2 unanswered.
	code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"),
		fmt.Sprintf(`{"threadId":%q,"runId":"a1","messages":[],%s}`, thread, resumeInt1), nil)
	if code != 200 || got["thread_id"] != thread || got["waiting_run"] == nil {
		t.Fatalf("partial answer: %d %v", code, got)
	}
	// A tool message may not answer the interrupt's own tool call.
	code, _, got = jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"),
		fmt.Sprintf(`{"threadId":%q,"runId":"a2","messages":[%s],"resume":[{"interruptId":"nope","status":"resolved"}]}`,
			thread, `{"role":"tool","toolCallId":"tc1","content":"y"},`+toolTC2), nil)
	if code != 200 || got["waiting_run"] == nil {
		t.Fatalf("wrong ids: %d %v", code, got)
	}
	if n := runCount(t, h); n != runs || h.Run(f.RunID).Status != run.InputRequired {
		t.Fatalf("a non-answer wrote something: runs %d→%d, status %s", runs, n, h.Run(f.RunID).Status)
	}

	// Complete: the interrupt by resume, tc2 by a tool message.
	s2 := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), answerBody(thread, "a3"), nil)
	f2 := p.Offer()
	if f2.RunID != f.RunID {
		t.Fatalf("the answer opened run %s, want the paused %s", f2.RunID, f.RunID)
	}
	var in struct {
		RunID       string          `json:"runId"`
		ParentRunID *string         `json:"parentRunId"`
		Resume      json.RawMessage `json:"resume"`
	}
	_ = json.Unmarshal(f2.RunInput, &in)
	if in.RunID != f.RunID || in.ParentRunID == nil || *in.ParentRunID != f.RunID || !strings.Contains(string(in.Resume), `"int1"`) {
		t.Fatalf("resumed input %s", f2.RunInput)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, thread)
	fs := s2.rest()
	if got := idsOf(fs); !slices.Equal(got, []string{"5", "6", "7", "8", "9"}) {
		t.Fatalf("resumed stream ids %v (types %v)", got, typesOf(t, fs))
	}
	h.WaitStatus(f.RunID, run.Completed)
	if n := runCount(t, h); n != runs {
		t.Fatalf("a resume created a run: %d→%d", runs, n)
	}

	// Nothing left to land on: snapshot, nothing written.
	code, _, got = jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), answerBody(thread, "a4"), nil)
	if code != 200 || got["thread_id"] != thread || got["waiting_run"] != nil {
		t.Fatalf("late answer: %d %v", code, got)
	}
	if _, has := got["waiting_run"]; has {
		t.Fatalf("waiting_run present with nothing waiting: %v", got)
	}
	// A resume on a thread funduq does not know has nothing to land on.
	code, _, got = jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), answerBody("thread_unknown", "a5"), nil)
	if code != 404 || errCode(got) != "thread_not_found" {
		t.Fatalf("unknown thread resume: %d %v", code, got)
	}
	if n := runCount(t, h); n != runs {
		t.Fatalf("late answers wrote runs: %d→%d", runs, n)
	}
	p.None()
}

// Racing answers: exactly one reopens the paused run (a stream), every
// other gets the thread snapshot; the provider is offered the run once.
func TestConcurrentResumes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	doorA := startDoor(t, h, nil)
	doorB := startDoor(t, h, nil)

	f := pause(t, h, p, openStream(t, "POST", aguiURL(doorA, p.Key, "echo"), input("t", "r1", ""), nil))
	runs := runCount(t, h)

	const n = 6
	type result struct {
		stream   bool
		snapshot map[string]any
		resp     *http.Response
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		srv := doorA
		if i%2 == 1 {
			srv = doorB
		}
		wg.Go(func() {
			resp, cancel := do(t, "POST", aguiURL(srv, p.Key, "echo"), answerBody(*f.ThreadID, fmt.Sprintf("race-%d", i)), nil)
			t.Cleanup(cancel)
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				results[i] = result{stream: true, resp: resp}
				return
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			if resp.StatusCode != 200 {
				t.Errorf("answer %d: %d %v", i, resp.StatusCode, m)
			}
			results[i] = result{snapshot: m}
		})
	}
	wg.Wait()
	winners := 0
	var win *http.Response
	for _, r := range results {
		if r.stream {
			winners++
			win = r.resp
			continue
		}
		if r.snapshot["thread_id"] != *f.ThreadID {
			t.Errorf("loser's snapshot %v", r.snapshot)
		}
	}
	if winners != 1 {
		t.Fatalf("%d answers reopened the run, want exactly 1", winners)
	}
	t.Cleanup(func() { win.Body.Close() })
	f2 := p.Offer()
	if f2.RunID != f.RunID {
		t.Fatalf("offered %s", f2.RunID)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f.ThreadID)
	h.WaitStatus(f.RunID, run.Completed)
	p.None()
	if got := runCount(t, h); got != runs {
		t.Fatalf("runs %d→%d", runs, got)
	}
}
