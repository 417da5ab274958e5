package agui_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

func TestDropNulls(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","timestamp":null,"rawEvent":null}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`},
		{`{"a":null}`, `{}`},
		{`{}`, `{}`},
		// Nothing dropped: the input comes back as given.
		{` {"a" : 1 , "b":[null]} `, ` {"a" : 1 , "b":[null]} `},
		// Nested nulls stay; kept members keep their bytes and order.
		{`{ "z" : { "x" : null } , "n" : null , "a\u0041" : 1.50e3 , "s" : "<&>\u00e9" , "l" : [ null ] , "f" : false }`,
			`{"z":{ "x" : null },"a\u0041":1.50e3,"s":"<&>\u00e9","l":[ null ],"f":false}`},
		{`{"first":null,"second":"x"}`, `{"second":"x"}`},
		{`{"dup":1,"dup":null}`, `{"dup":1}`},
	}
	for _, tc := range cases {
		got, err := agui.DropNulls(json.RawMessage(tc.in))
		if err != nil {
			t.Errorf("DropNulls(%s): %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("DropNulls(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("DropNulls(%s) = %s is not valid JSON", tc.in, got)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `"x"`, `{"a":}`, `{"a":1} {}`, `{"a":1`} {
		if _, err := agui.DropNulls(json.RawMessage(bad)); !errors.Is(err, agui.ErrMalformed) {
			t.Errorf("DropNulls(%s) err = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestWithRunIDs(t *testing.T) {
	cases := []struct{ in, want string }{
		// The ids named already: the input comes back as given.
		{` {"type":"RUN_STARTED", "threadId":"t","runId":"r"} `, ` {"type":"RUN_STARTED", "threadId":"t","runId":"r"} `},
		{`{"type":"RUN_STARTED","threadId":"\u0074","runId":"r"}`, `{"type":"RUN_STARTED","threadId":"\u0074","runId":"r"}`},
		// Others named: replaced in place, the rest kept byte for byte.
		{`{"type":"RUN_STARTED","threadId":"theirs","runId":"r","input":{"threadId":"x"}}`,
			`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"x"}}`},
		{`{"type":"RUN_FINISHED","runId":7,"result":{"a" : 1},"threadId":null}`,
			`{"type":"RUN_FINISHED","runId":"r","result":{"a" : 1},"threadId":"t"}`},
		// A key spelled with an escape is the same key.
		{`{"\u0074hreadId":"theirs","runId":"r"}`, `{"\u0074hreadId":"t","runId":"r"}`},
		// Absent ids are not added (the event's validity is not its business).
		{`{"type":"RUN_STARTED"}`, `{"type":"RUN_STARTED"}`},
	}
	for _, tc := range cases {
		got, err := agui.WithRunIDs(json.RawMessage(tc.in), "t", "r")
		if err != nil || string(got) != tc.want {
			t.Errorf("WithRunIDs(%s)\n got %s, %v\nwant %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `{"threadId":}`} {
		if _, err := agui.WithRunIDs(json.RawMessage(bad), "t", "r"); !errors.Is(err, agui.ErrMalformed) {
			t.Errorf("WithRunIDs(%s) err = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestDropOptionalNullsNested: AG-UI 1.0 refuses null for an optional
// member at any depth, so the nulls inside the structures it types go too;
// a null that is a value AG-UI allows (a patch operation's value, inside
// a snapshot, a rawEvent, a result, metadata, an activity's content) stays.
func TestDropOptionalNullsNested(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","name":null,"content":null,"toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}","x":null},"encryptedValue":null,"metadata":{"k":null}}]},{"id":"u","role":"user","content":[{"type":"text","text":"t","id":null,"metadata":{"n":null}},{"type":"image","source":{"type":"url","value":"u","mimeType":null}}]},{"id":"v","role":"activity","activityType":"p","content":{"n":null}}]}`,
			`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"},"metadata":{"k":null}}]},{"id":"u","role":"user","content":[{"type":"text","text":"t","metadata":{"n":null}},{"type":"image","source":{"type":"url","value":"u"}}]},{"id":"v","role":"activity","activityType":"p","content":{"n":null}}]}`},
		{`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":null,"from":null}]}`,
			`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a","value":null}]}`},
		{`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"a":null},"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","message":null,"metadata":{"m":null}}]},"usage":[{"model":null,"inputTokens":1}]}`,
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"a":null},"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","metadata":{"m":null}}]},"usage":[{"inputTokens":1}]}`},
		{`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","parentRunId":null,"state":{"s":null},"messages":[{"id":"u","role":"user","content":"hi","name":null}],"tools":[{"name":"f","description":"d","parameters":null}],"forwardedProps":null}}`,
			`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","state":{"s":null},"messages":[{"id":"u","role":"user","content":"hi"}],"tools":[{"name":"f","description":"d"}]}}`},
		{`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"text","text":"x","id":null}]}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"text","text":"x"}]}`},
		{`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","outcome":{"type":"suspended","interruptIds":null}}`,
			`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","outcome":{"type":"suspended"}}`},
		// Nothing to drop: the input comes back as given.
		{`{"type":"MESSAGES_SNAPSHOT", "messages":[ {"id":"a","role":"tool","toolCallId":"c","content":"x"} ]}`,
			`{"type":"MESSAGES_SNAPSHOT", "messages":[ {"id":"a","role":"tool","toolCallId":"c","content":"x"} ]}`},
	}
	for _, tc := range cases {
		got, err := agui.DropOptionalNulls(json.RawMessage(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("DropOptionalNulls(%s)\n got %s, %v\nwant %s", tc.in, got, err, tc.want)
		}
		if _, err := agui.Validate(got); err != nil {
			t.Errorf("Validate(%s): %v", got, err)
		}
	}
}

func TestReasoningRole(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"REASONING_MESSAGE_START","messageId":"m","role":"assistant"}`, `{"type":"REASONING_MESSAGE_START","messageId":"m","role":"reasoning"}`},
		{`{"type":"REASONING_MESSAGE_START", "messageId":"m","role":"reasoning"}`, `{"type":"REASONING_MESSAGE_START", "messageId":"m","role":"reasoning"}`},
		{`{"type":"TEXT_MESSAGE_START", "messageId":"m","role":"assistant"}`, `{"type":"TEXT_MESSAGE_START", "messageId":"m","role":"assistant"}`},
	}
	for _, tc := range cases {
		got, err := agui.ReasoningRole(json.RawMessage(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("ReasoningRole(%s)\n got %s, %v\nwant %s", tc.in, got, err, tc.want)
		}
	}
}
