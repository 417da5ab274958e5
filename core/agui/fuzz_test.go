package agui_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/strictjson"
)

func FuzzValidate(f *testing.F) {
	for _, tc := range typeCases {
		f.Add([]byte(tc.good))
		f.Add([]byte(withCommon(tc.good)))
	}
	for _, s := range []string{
		``, `null`, `[]`, `{}`, `{"type":1}`, `{"type":"FUTURE"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","toolCallId":"tc"}]}}`,
		`{"type":"RUN_ERROR","message":"m","code":"c"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"tc","type":"function","function":{"name":"f","arguments":""}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := agui.Validate(data)
		if err != nil {
			if !errors.Is(err, agui.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
			t.Fatalf("accepted %q, which is not a JSON object", data)
		}
		var typ string
		if err := json.Unmarshal(obj["type"], &typ); err != nil || typ != info.Type {
			t.Fatalf("accepted %q with Type %q", data, info.Type)
		}
		if info.Known != agui.IsKnown(typ) {
			t.Fatalf("Known = %v for %q", info.Known, typ)
		}
		if info.RunFinished != (typ == agui.TypeRunFinished) || info.RunError != (typ == agui.TypeRunError) {
			t.Fatalf("info %+v for %q", info, typ)
		}
		if info.Interrupts != nil {
			var arr []json.RawMessage
			if err := json.Unmarshal(info.Interrupts, &arr); err != nil || len(arr) == 0 {
				t.Fatalf("Interrupts %q is not a non-empty array", info.Interrupts)
			}
		}
		out, err := agui.DropNulls(data)
		if err != nil || !json.Valid(out) {
			t.Fatalf("DropNulls(%q) = %q, %v", data, out, err)
		}
	})
}

// FuzzFold takes events one per line.
func FuzzFold(f *testing.F) {
	seeds := [][]string{
		{runStarted,
			`{"type":"TEXT_MESSAGE_START","messageId":"m1"}`,
			`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hi <there> & \u00e9"}`,
			`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
			runFinished},
		{runStarted,
			`{"type":"TOOL_CALL_START","toolCallId":"tc1","toolCallName":"f","parentMessageId":"m1"}`,
			`{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":"{\"a\":1}"}`,
			`{"type":"TOOL_CALL_END","toolCallId":"tc1"}`,
			`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":[{"type":"text","text":"x"}]}`,
			`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r"}]}}`},
		{`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"user","delta":"a"}`,
			`{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}`,
			`{"type":"TOOL_CALL_CHUNK","toolCallId":"t","toolCallName":"n","delta":"{"}`,
			`{"type":"TOOL_CALL_CHUNK","delta":"}"}`,
			`{"type":"FUTURE","x":1}`},
	}
	for _, s := range seeds {
		f.Add([]byte(strings.Join(s, "\n")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var evs []json.RawMessage
		for _, line := range bytes.Split(data, []byte("\n")) {
			evs = append(evs, json.RawMessage(line))
		}
		_ = agui.OpenAsks(evs)
		msgs, err := agui.Fold(evs)
		if err != nil {
			if !errors.Is(err, agui.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, m := range msgs {
			var obj map[string]json.RawMessage
			if !json.Valid(m) || json.Unmarshal(m, &obj) != nil || obj == nil {
				t.Fatalf("folded message %q is not a JSON object", m)
			}
			if _, ok := obj["id"]; !ok {
				t.Fatalf("folded message %q has no id", m)
			}
		}
	})
}

// FuzzStringField: the field reader's shortcut for strings without escapes
// reads what encoding/json reads, for every valid JSON value.
func FuzzStringField(f *testing.F) {
	for _, s := range []string{`"plain"`, `"esc\"aped"`, `"\u00e9t\u00e9"`, `""`, "\"bad \xff utf8\"", `12`, `null`, ` "spaced" `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		got, ok := agui.StringField(raw)
		var want string
		isString := bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) && json.Unmarshal(raw, &want) == nil
		if ok != isString || got != want {
			t.Fatalf("%q: read %q, %v; encoding/json reads %q, %v", raw, got, ok, want, isString)
		}
	})
}

// WithRunIDs of any object is a valid object whose threadId and runId
// (where present) are the given ids and whose other members are the
// input's.
func FuzzWithRunIDs(f *testing.F) {
	for _, s := range []string{`{}`, `{"threadId":"x","runId":"y"}`, `{"threadId":"t","runId":"r","a":[1,{"threadId":2}]}`,
		`{"\u0072unId":null,"b":"\u00e9"}`, `{"threadId":"x","threadId":"y"}`, `[]`, `null`} {
		f.Add([]byte(s), "t", "r")
	}
	f.Fuzz(func(t *testing.T, raw []byte, threadID, runID string) {
		if !utf8.ValidString(threadID) || !utf8.ValidString(runID) {
			return // funduq's ids are ASCII
		}
		got, err := agui.WithRunIDs(raw, threadID, runID)
		var in map[string]json.RawMessage
		if json.Unmarshal(raw, &in) != nil || bytes.TrimSpace(raw)[0] != '{' {
			if err == nil {
				t.Fatalf("WithRunIDs(%q) of a non-object = %s", raw, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("WithRunIDs(%q): %v", raw, err)
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("WithRunIDs(%q) = %q: %v", raw, got, err)
		}
		if len(out) != len(in) {
			t.Fatalf("WithRunIDs(%q) = %q: members %d, want %d", raw, got, len(out), len(in))
		}
		for k, v := range in {
			switch k {
			case "threadId", "runId":
				want := map[string]string{"threadId": threadID, "runId": runID}[k]
				var s string
				if json.Unmarshal(out[k], &s) != nil || s != want {
					t.Fatalf("WithRunIDs(%q) = %q: %s is %s, want %q", raw, got, k, out[k], want)
				}
			default:
				if !bytes.Equal(bytes.TrimSpace(out[k]), bytes.TrimSpace(v)) {
					t.Fatalf("WithRunIDs(%q) = %q: %s changed", raw, got, k)
				}
			}
		}
	})
}

// DropNulls of any object without repeated keys is a valid object holding
// exactly the input's members whose value is not null, each unchanged.
func FuzzDropNulls(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":null}`, `{"a":1,"b":null,"c":{"d":null}}`, ` { "n" : null , "s" : "\u00e9" } `, `[]`, `null`, `{"a":1}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := agui.DropNulls(raw)
		var in map[string]json.RawMessage
		if json.Unmarshal(raw, &in) != nil || bytes.TrimSpace(raw)[0] != '{' {
			if err == nil {
				t.Fatalf("DropNulls(%q) of a non-object = %s", raw, got)
			}
			return
		}
		if strictjson.Check(raw, 0) != nil {
			return // repeated keys: the intake refuses them first
		}
		if err != nil {
			t.Fatalf("DropNulls(%q): %v", raw, err)
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("DropNulls(%q) = %q: %v", raw, got, err)
		}
		for k, v := range in {
			w, kept := out[k]
			if isNull := string(bytes.TrimSpace(v)) == "null"; isNull == kept {
				t.Fatalf("DropNulls(%q) = %q: member %q kept %v", raw, got, k, kept)
			}
			if kept && !bytes.Equal(bytes.TrimSpace(w), bytes.TrimSpace(v)) {
				t.Fatalf("DropNulls(%q) = %q: %s changed", raw, got, k)
			}
		}
		if len(out) > len(in) {
			t.Fatalf("DropNulls(%q) = %q: members added", raw, got)
		}
	})
}

// decodeObject reads any input exactly as encoding/json decodes it into a
// map[string]json.RawMessage: the same verdict, keys and value bytes.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, ` {"a" : [1, {"b":null}] , "c":"\u00e9"} `, "{\"\xff\":1}", `{"\ud800":"\udfff"}`,
		`{"a":1}x`, `{"a":1,}`, `[]`, `null`, `{"A":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := agui.DecodeObject(raw)
		var want map[string]json.RawMessage
		wantOK := len(bytes.TrimSpace(raw)) > 0 && bytes.TrimSpace(raw)[0] == '{' && json.Unmarshal(raw, &want) == nil
		if ok != wantOK {
			t.Fatalf("decodeObject(%q) ok %v, encoding/json %v", raw, ok, wantOK)
		}
		if len(got) != len(want) {
			t.Fatalf("decodeObject(%q) = %q, encoding/json %q", raw, got, want)
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("decodeObject(%q)[%q] = %q, encoding/json %q", raw, k, got[k], v)
			}
		}
	})
}
