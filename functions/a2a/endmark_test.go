package a2a_test

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A blocking send answered from the end marker's outcome answers exactly
// what the settled record says: the same request sent again (a retry, same
// Idempotency-Key, so not a run this request wrote) takes the record read,
// and the two responses are the same bytes — a completed run with agent
// messages, failed runs (the provider's own RUN_ERROR, a stream that ended
// without finishing), a paused run with its interrupt, in both protocol
// versions. A marker whose outcome is over livefeed.MaxOutcome carries none,
// and the door reads the record as before.
func TestMarkedAnswerIsTheRecordsAnswer(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, m := meteredDoor(t, h, true)

	interrupt := func(payload string) func(runID, threadID string) {
		return func(runID, threadID string) {
			p.Event(runID, runStarted(threadID, runID))
			p.Event(runID, `{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"approve"}`)
			p.Event(runID, `{"type":"TOOL_CALL_ARGS","toolCallId":"tc-1","delta":"{}"}`)
			p.Event(runID, `{"type":"TOOL_CALL_END","toolCallId":"tc-1"}`)
			p.Event(runID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ask-1","toolCallId":"tc-1","reason":"approval","message":%q}]}}`,
				threadID, runID, payload))
			p.Finish(runID)
		}
	}
	cases := []struct {
		name    string
		play    func(runID, threadID string)
		state   string
		inText  string // a string the answer must hold
		commits int    // the door's committed transactions for the first send
	}{
		{"completed with agent messages", func(runID, threadID string) {
			p.Event(runID, runStarted(threadID, runID))
			p.Event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
			p.Event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"one <&> \u00e9"}`)
			p.Event(runID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
			p.Event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"a2","role":"assistant"}`)
			p.Event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a2","delta":"two"}`)
			p.Event(runID, `{"type":"TEXT_MESSAGE_END","messageId":"a2"}`)
			p.Event(runID, runFinished(threadID, runID))
			p.Finish(runID)
		}, "completed", "two", 1},
		{"failed by the provider's RUN_ERROR", func(runID, threadID string) {
			p.Event(runID, runStarted(threadID, runID))
			p.Event(runID, `{"type":"RUN_ERROR","message":"it broke <here>","code":"boom_code"}`)
			p.Finish(runID)
		}, "failed", "boom_code", 1},
		{"failed: stream ended without finishing", func(runID, threadID string) {
			p.Event(runID, runStarted(threadID, runID))
			p.Finish(runID)
		}, "failed", "provider_stream_ended_without_finishing", 1},
		{"paused on an interrupt", interrupt("May I <&>?"), "input-required", "May I", 1},
		{"paused on an interrupt over the marker's cap", interrupt(strings.Repeat("x", livefeed.MaxOutcome)), "input-required", "xxxx", 2},
	}
	for _, version := range []string{"", "1.0"} {
		for i, tc := range cases {
			t.Run(fmt.Sprintf("%s/v%s", tc.name, version), func(t *testing.T) {
				c := newClient(t, srv, p.Key, "echo", version)
				method := "message/send"
				if version == "1.0" {
					method = "SendMessage"
				}
				body := c.body(method, map[string]any{"message": c.message(fmt.Sprintf("eq-%s-%d", version, i), "hi", nil)})
				hdr := map[string]string{a2a.IdempotencyHeader: fmt.Sprintf("eq-%s-%d", version, i)}
				done := make(chan struct{})
				go func() {
					defer close(done)
					f := p.Offer()
					p.Accept(f.RunID)
					tc.play(f.RunID, *f.ThreadID)
				}()
				m.reset()
				marked := rawAnswer(t, c, body, hdr)
				<-done
				markedCommits, _, _, _ := m.read()
				m.reset()
				recorded := rawAnswer(t, c, body, hdr)
				recordCommits, _, _, _ := m.read()

				if marked != recorded {
					t.Errorf("the answers differ:\n from the end marker %s\n from the record     %s", marked, recorded)
				}
				var r struct {
					Result map[string]any `json:"result"`
				}
				if err := json.Unmarshal([]byte(marked), &r); err != nil {
					t.Fatalf("answer %s: %v", marked, err)
				}
				task := r.Result
				if version == "1.0" {
					task, _ = r.Result["task"].(map[string]any)
				}
				if got := stateOf(task); !strings.EqualFold(strings.ReplaceAll(strings.TrimPrefix(got, "TASK_STATE_"), "_", "-"), tc.state) {
					t.Errorf("state %q, want %q: %s", got, tc.state, marked)
				}
				if !strings.Contains(marked, tc.inText) {
					t.Errorf("answer %s has no %q", marked, tc.inText)
				}
				if markedCommits != tc.commits {
					t.Errorf("the first send committed %d transactions at the door, want %d", markedCommits, tc.commits)
				}
				if recordCommits < 2 {
					t.Errorf("the retry committed %d transactions: it did not read the record", recordCommits)
				}
			})
		}
	}
}

// rawAnswer posts body and returns the response's bytes.
func rawAnswer(t *testing.T, c *client, body string, hdr map[string]string) string {
	t.Helper()
	resp, cancel := c.post(body, hdr)
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer %d %s: %v", resp.StatusCode, b, err)
	}
	return string(b)
}
