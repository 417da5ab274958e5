package agui_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

// events turns one JSON event per line into a slice.
func events(lines ...string) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(lines))
	for _, l := range lines {
		out = append(out, json.RawMessage(l))
	}
	return out
}

const (
	runStarted  = `{"type":"RUN_STARTED","threadId":"thread_1","runId":"run_1"}`
	runFinished = `{"type":"RUN_FINISHED","threadId":"thread_1","runId":"run_1"}`
)

func checkFold(t *testing.T, in []json.RawMessage, want ...string) {
	t.Helper()
	got, err := agui.Fold(in)
	if err != nil {
		t.Fatalf("Fold: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("Fold gave %d messages, want %d:\n%s", len(got), len(want), join(got))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("message %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func join(msgs []json.RawMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.Write(m)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestFoldTextStreaming(t *testing.T) {
	checkFold(t, events(
		runStarted,
		`{"type":"TEXT_MESSAGE_START","messageId":"msg-1","role":"assistant","timestamp":1}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-1","delta":"Hello, "}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-1","delta":""}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-1","delta":"<b>world</b> & \"you\" \u00e9"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"msg-1"}`,
		`{"type":"STATE_SNAPSHOT","snapshot":{"n":1}}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"msg-2"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-2","delta":"Bye."}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"msg-2"}`,
		runFinished,
	),
		`{"id":"msg-1","role":"assistant","content":"Hello, <b>world</b> & \"you\" é"}`,
		`{"id":"msg-2","role":"assistant","content":"Bye."}`,
	)
}

func TestFoldInterleavedMessagesKeepFirstAppearanceOrder(t *testing.T) {
	checkFold(t, events(
		`{"type":"TEXT_MESSAGE_START","messageId":"a","role":"system"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"b"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"B1"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"A1"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"c","delta":"no start"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"a"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"B2"}`,
		// Reopening keeps the established role and appends.
		`{"type":"TEXT_MESSAGE_START","messageId":"a","role":"user"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"A2"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"empty","role":"user"}`,
	),
		`{"id":"a","role":"system","content":"A1A2"}`,
		`{"id":"b","role":"assistant","content":"B1B2"}`,
		`{"id":"c","role":"assistant","content":"no start"}`,
		`{"id":"empty","role":"user","content":""}`,
	)
}

func TestFoldToolCallWithResult(t *testing.T) {
	checkFold(t, events(
		runStarted,
		`{"type":"TEXT_MESSAGE_START","messageId":"msg-1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-1","delta":"Let me check."}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"msg-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"tc-1","toolCallName":"get_weather","parentMessageId":"msg-1"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"tc-1","delta":"{\"city\":"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"tc-1","delta":"\"Paris\"}"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"tc-1"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"tc-2","toolCallName":"get_time","parentMessageId":"msg-1"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"tc-2"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"res-1","toolCallId":"tc-1","content":"sunny, 21°C <hot>","role":"tool"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"res-2","toolCallId":"tc-2","content":[{"type":"text","text":"noon"}]}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"msg-2","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg-2","delta":"It is sunny."}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"msg-2"}`,
		runFinished,
	),
		`{"id":"msg-1","role":"assistant","content":"Let me check.","toolCalls":[`+
			`{"id":"tc-1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},`+
			`{"id":"tc-2","type":"function","function":{"name":"get_time","arguments":""}}]}`,
		`{"id":"res-1","role":"tool","content":"sunny, 21°C <hot>","toolCallId":"tc-1"}`,
		`{"id":"res-2","role":"tool","content":[{"type":"text","text":"noon"}],"toolCallId":"tc-2"}`,
		`{"id":"msg-2","role":"assistant","content":"It is sunny."}`,
	)
}

func TestFoldToolCallWithoutParentOrResult(t *testing.T) {
	checkFold(t, events(
		runStarted,
		`{"type":"TOOL_CALL_START","toolCallId":"tc-7","toolCallName":"confirm"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"tc-7","delta":"{}"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"unknown","delta":"dropped"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"tc-7"}`,
		// A repeated start keeps the first call.
		`{"type":"TOOL_CALL_START","toolCallId":"tc-7","toolCallName":"other"}`,
		// A parent that is not an assistant message cannot hold tool calls.
		`{"type":"TEXT_MESSAGE_START","messageId":"u1","role":"user"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"tc-8","toolCallName":"f","parentMessageId":"u1"}`,
		// A parent not seen yet becomes an assistant message.
		`{"type":"TOOL_CALL_START","toolCallId":"tc-9","toolCallName":"g","parentMessageId":"later"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"later","delta":"text after the call"}`,
		`{"type":"RUN_FINISHED","threadId":"thread_1","runId":"run_1","outcome":{"type":"interrupt","interrupts":[{"id":"int-1","reason":"tool_call","toolCallId":"tc-7"}]}}`,
	),
		`{"id":"tc-7","role":"assistant","toolCalls":[{"id":"tc-7","type":"function","function":{"name":"confirm","arguments":"{}"}}]}`,
		`{"id":"u1","role":"user","content":""}`,
		`{"id":"tc-8","role":"assistant","toolCalls":[{"id":"tc-8","type":"function","function":{"name":"f","arguments":""}}]}`,
		`{"id":"later","role":"assistant","content":"text after the call","toolCalls":[{"id":"tc-9","type":"function","function":{"name":"g","arguments":""}}]}`,
	)
}

func TestFoldChunks(t *testing.T) {
	checkFold(t, events(
		runStarted,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","delta":"Hel"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"lo"}`,
		`{"type":"RAW","event":{"x":1}}`, // stands aside: the stream stays open
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"!"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","role":"user","delta":"switch"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"ed"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"tc1","toolCallName":"search","parentMessageId":"m1","delta":"{\"q\":"}`,
		`{"type":"TOOL_CALL_CHUNK","delta":"\"go\"}"}`,
		// The tool-call chunk closed the text stream: this continues nothing.
		`{"type":"TEXT_MESSAGE_CHUNK","delta":"lost"}`,
		// ...and the text chunk closed the tool-call stream.
		`{"type":"TOOL_CALL_CHUNK","delta":"lost"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"tc2","delta":"{}"}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallName":"late_name"}`,
		`{"type":"STEP_STARTED","stepName":"s"}`, // closes every chunk stream
		`{"type":"TOOL_CALL_CHUNK","delta":"lost"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":"found"}`,
		runFinished,
	),
		`{"id":"m1","role":"assistant","content":"Hello!","toolCalls":[{"id":"tc1","type":"function","function":{"name":"search","arguments":"{\"q\":\"go\"}"}}]}`,
		`{"id":"m2","role":"user","content":"switched"}`,
		`{"id":"tc2","role":"assistant","toolCalls":[{"id":"tc2","type":"function","function":{"name":"late_name","arguments":"{}"}}]}`,
		`{"id":"r1","role":"tool","content":"found","toolCallId":"tc1"}`,
	)
}

func TestFoldIgnoresEverythingElse(t *testing.T) {
	checkFold(t, events(
		runStarted,
		`{"type":"STEP_STARTED","stepName":"s"}`,
		`{"type":"STATE_DELTA","delta":[]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"x","role":"user","content":"y"}]}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"rm","role":"reasoning"}`,
		`{"type":"REASONING_MESSAGE_CONTENT","messageId":"rm","delta":"hmm"}`,
		`{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"hmm"}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{}}`,
		`{"type":"CUSTOM","name":"c","value":1}`,
		`{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n","messageId":"m"}`,
		`{"type":"TEXT_MESSAGE_START_V2","messageId":"m"}`,
		runFinished,
	))
	got, err := agui.Fold(nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Fold(nil) = %v, %v", got, err)
	}
}

func TestFoldRejectsMalformedEvents(t *testing.T) {
	for _, bad := range []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1"}`,
		`{"no":"type"}`,
		`[]`,
		`not json`,
	} {
		_, err := agui.Fold(events(runStarted, bad, runFinished))
		if !errors.Is(err, agui.ErrMalformed) {
			t.Errorf("Fold with %s: err = %v, want ErrMalformed", bad, err)
		}
		if err != nil && !strings.Contains(err.Error(), "event 1") {
			t.Errorf("error %v does not name event 1", err)
		}
	}
}
