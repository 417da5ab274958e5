package agui_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// A resume (GET /runs/{id}/events with Last-Event-ID) from inside a
// message, tool call, reasoning span or step sends, right after its
// RUN_STARTED and without ids, the stored events that opened what is open
// there, in their order, then the events after the id, each once: an
// AG-UI client that verifies each stream afresh (@ag-ui/client) gets every
// opening it needs, and a client that kept its state no event it has
// (design.md §The doors, "A resume from inside a message"). Events a
// provider sent, read by a stranger to the door's code: what is open at
// each resume point is worked out by hand from each script.
func TestOutsideResumeReopensWhatIsOpen(t *testing.T) {
	h := nodetest.Start(t, nil)
	p, srv := echoServed(t, h)
	scripts := []struct {
		name   string
		events []string // after the run's RUN_STARTED (seq 1); RUN_FINISHED follows
		// resume point (Last-Event-ID) -> the seqs of the events it reopens
		open map[int][]int
	}{
		{"text message", []string{
			`{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`, // 2
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"one "}`,   // 3
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"two"}`,    // 4
			`{"type":"TEXT_MESSAGE_END","messageId":"a1"}`,                      // 5
		}, map[int][]int{1: nil, 2: {2}, 3: {2}, 4: {2}, 5: nil}},
		{"tool call inside a message", []string{
			`{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`,                      // 2
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"looking"}`,                     // 3
			`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f","parentMessageId":"a1"}`, // 4
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{}"}`,                               // 5
			`{"type":"TEXT_MESSAGE_END","messageId":"a1"}`,                                           // 6
			`{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":""}`,                                 // 7
			`{"type":"TOOL_CALL_END","toolCallId":"c1"}`,                                             // 8
			`{"type":"TEXT_MESSAGE_START","messageId":"a2","role":"assistant"}`,                      // 9
			`{"type":"TEXT_MESSAGE_END","messageId":"a2"}`,                                           // 10
		}, map[int][]int{3: {2}, 4: {2, 4}, 5: {2, 4}, 6: {4}, 7: {4}, 8: nil, 9: {9}, 10: nil}},
		{"step and reasoning", []string{
			`{"type":"STEP_STARTED","stepName":"plan"}`,                               // 2
			`{"type":"REASONING_START","messageId":"r1"}`,                             // 3
			`{"type":"REASONING_MESSAGE_START","messageId":"r1m","role":"reasoning"}`, // 4
			`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1m","delta":"hmm"}`,    // 5
			`{"type":"REASONING_MESSAGE_END","messageId":"r1m"}`,                      // 6
			`{"type":"REASONING_END","messageId":"r1"}`,                               // 7
			`{"type":"STEP_FINISHED","stepName":"plan"}`,                              // 8
			`{"type":"STEP_STARTED","stepName":"act"}`,                                // 9
			`{"type":"STEP_FINISHED","stepName":"act"}`,                               // 10
		}, map[int][]int{3: {2, 3}, 5: {2, 3, 4}, 6: {2, 3}, 7: {2}, 8: nil, 9: {9}, 10: nil}},
	}
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			s, f := takenRun(t, p, srv)
			p.Event(f.RunID, runStartedFor(f))
			for _, ev := range sc.events {
				p.Event(f.RunID, ev)
			}
			p.Event(f.RunID, `{"type":"RUN_FINISHED","threadId":"`+*f.ThreadID+`","runId":"`+f.RunID+`"}`)
			p.Finish(f.RunID)
			s.rest()
			ends := run.Completed
			if sc.name == "tool call inside a message" {
				// Its tool call is left to the caller: the run finished
				// asking (seed 001, design.md §The status machine).
				ends = run.InputRequired
			}
			h.WaitStatus(f.RunID, ends)
			last := len(sc.events) + 2 // the RUN_FINISHED's seq
			// The events as the run's own stream sends them, by seq.
			sent := map[string]string{}
			for _, f := range events(openStream(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", nil).rest()) {
				sent[f.ID] = f.Data
			}
			for at, open := range sc.open {
				r := openStream(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "",
					map[string]string{agui.LastEventIDHeader: strconv.Itoa(at)})
				got := events(r.rest())
				r.close()
				want := []frame{{Data: fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID)}}
				for _, seq := range open {
					want = append(want, frame{Data: sent[strconv.Itoa(seq)]})
				}
				for seq := at + 1; seq <= last; seq++ {
					want = append(want, frame{ID: strconv.Itoa(seq), Data: sent[strconv.Itoa(seq)]})
				}
				if !slices.Equal(got, want) {
					t.Errorf("resumed after %d:\n got %q\nwant %q", at, got, want)
				}
			}
		})
	}
}
