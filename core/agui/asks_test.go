package agui_test

import (
	"slices"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

func TestOpenAsks(t *testing.T) {
	interrupted := func(interrupts string) string {
		return `{"type":"RUN_FINISHED","threadId":"thread_1","runId":"run_1","outcome":{"type":"interrupt","interrupts":` + interrupts + `}}`
	}
	cases := []struct {
		name   string
		events []string
		want   []string
	}{
		{
			name: "text only",
			events: []string{runStarted,
				`{"type":"TEXT_MESSAGE_START","messageId":"m1"}`,
				`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi"}`,
				`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
				runFinished},
		},
		{
			name: "tool call with result",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"f"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"tc-1"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc-1","content":"ok"}`,
				runFinished},
		},
		{
			name: "frontend tool call left unanswered",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-2","toolCallName":"ask_user","parentMessageId":"m1"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"tc-2","delta":"{}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"tc-2"}`,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"ask_user"}`,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-3","toolCallName":"lookup"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"r3","toolCallId":"tc-3","content":"ok"}`,
				`{"type":"RUN_FINISHED","threadId":"thread_1","runId":"run_1","outcome":{"type":"success","pendingToolCallIds":["tc-1","tc-2"]}}`},
			want: []string{"tc-1", "tc-2"},
		},
		{
			name: "unfinished run asks nothing",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"f"}`,
				`{"type":"RUN_ERROR","message":"boom"}`},
		},
		{
			name: "interrupt outcome",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-9","toolCallName":"send_email"}`,
				`{"type":"TOOL_CALL_ARGS","toolCallId":"tc-9","delta":"{\"to\":\"a@b.com\"}"}`,
				`{"type":"TOOL_CALL_END","toolCallId":"tc-9"}`,
				interrupted(`[{"id":"int-1","reason":"tool_call","toolCallId":"tc-9"},{"id":"int-2","reason":"input_required","message":"Which account?"},{"id":"int-3","reason":"confirmation","toolCallId":""}]`)},
			want: []string{"int-2", "int-3", "tc-9"},
		},
		{
			name: "interrupt for a call that already has a result",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"f"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc-1","content":"ok"}`,
				interrupted(`[{"id":"int-1","reason":"tool_call","toolCallId":"tc-1"}]`)},
			want: []string{"tc-1"},
		},
		{
			name: "only the last RUN_FINISHED's interrupts count",
			events: []string{runStarted,
				interrupted(`[{"id":"int-old","reason":"r"}]`),
				runStarted,
				runFinished},
		},
		{
			name: "the last RUN_FINISHED is the interrupt",
			events: []string{runStarted, runFinished, runStarted,
				interrupted(`[{"id":"int-new","reason":"r"},{"id":"int-new","reason":"r"}]`)},
			want: []string{"int-new"},
		},
		{
			name: "chunk-opened tool calls",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_CHUNK","toolCallId":"tc-a","toolCallName":"f","delta":"{"}`,
				`{"type":"TOOL_CALL_CHUNK","delta":"}"}`,
				`{"type":"TOOL_CALL_CHUNK","toolCallId":"tc-b","toolCallName":"g"}`,
				`{"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"tc-b","content":"ok"}`,
				runFinished},
			want: []string{"tc-a"},
		},
		{
			name: "result before start still answers",
			events: []string{runStarted,
				`{"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"tc-1","content":"ok"}`,
				`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"f"}`,
				runFinished},
		},
		{
			name: "junk is skipped",
			events: []string{`not json`, `[]`, `{"type":5}`, `{"type":"TOOL_CALL_START","toolCallId":7}`,
				`{"type":"TOOL_CALL_START","toolCallId":"","toolCallName":"f"}`,
				`{"type":"RUN_FINISHED","outcome":{"type":"interrupt","interrupts":[{"reason":"no id"},"x",{"id":"ok"}]}}`},
			want: []string{"ok"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := agui.OpenAsks(events(tc.events...))
			if !slices.Equal(got, tc.want) {
				t.Errorf("OpenAsks = %q, want %q", got, tc.want)
			}
		})
	}
}
