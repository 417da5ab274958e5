package a2a_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// TestOutsideChunkStreamIsOneArtifact: AG-UI's TEXT_MESSAGE_CHUNK names
// its message on the first chunk; a later chunk without a messageId
// continues the open chunk stream (the official client's transformChunks
// folds it into the same message). The A2A view of such a run is one
// answer, not the first chunk under its id and the rest under another —
// and the provider's other event kinds (tool calls, state, reasoning,
// RAW, CUSTOM) do not disturb it.
func TestOutsideChunkStreamIsOneArtifact(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
	got := playNext(p, func(r, th string) []string {
		return []string{
			runStarted(th, r),
			`{"type":"STEP_STARTED","stepName":"answer","timestamp":1733440000000}`,
			`{"type":"REASONING_START","messageId":"r1"}`,
			`{"type":"REASONING_MESSAGE_START","messageId":"r1m","role":"reasoning"}`,
			`{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1m","delta":"secret thoughts"}`,
			`{"type":"REASONING_MESSAGE_END","messageId":"r1m"}`,
			`{"type":"REASONING_END","messageId":"r1"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"Hello "}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"wörld "}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"👋"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"f","delta":"{}"}`,
			`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":1}]}`,
			`{"type":"RAW","event":{"x":1}}`,
			`{"type":"CUSTOM","name":"n","value":null}`,
			`{"type":"STEP_FINISHED","stepName":"answer"}`,
			runFinished(th, r),
		}
	})
	task := c.send(c.message("m-1", "hi", nil), nil)
	recv(t, got, "the offer")
	arts, _ := task["artifacts"].([]any)
	if len(arts) != 1 {
		t.Fatalf("the one chunked answer is %d artifacts: %v", len(arts), arts)
	}
	if s := fmt.Sprint(arts[0]); !strings.Contains(s, "Hello wörld 👋") || strings.Contains(s, "secret") {
		t.Errorf("artifact %s", s)
	}
}
