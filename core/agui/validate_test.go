package agui_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

// typeCase describes one known event type: a valid event carrying every
// field its schema names, which of those fields are required, and for each
// typed field a value of the wrong JSON type.
type typeCase struct {
	good     string
	required []string
	wrong    map[string]string
}

// Values of the wrong type for the usual field kinds.
var (
	notString = `42`
	notNumber = `"1700000000000"`
	notObject = `["x"]`
	notArray  = `{"op":"add"}`
	notBool   = `"true"`
)

// common are the optional fields every event may carry, with wrong values.
var common = map[string]string{
	"timestamp":     notNumber,
	"metadata":      notObject,
	"subagentRunId": notString,
}

// runScoped are the types whose schemas name no subagentRunId.
var runScoped = map[string]bool{
	agui.TypeRunStarted: true, agui.TypeRunFinished: true, agui.TypeRunError: true, agui.TypeMessagesSnapshot: true,
}

const commonGood = `"timestamp":1700000000000,"rawEvent":{"provider":"native"},"metadata":{"k":null},"subagentRunId":"sub-1"`

var typeCases = map[string]typeCase{
	agui.TypeRunStarted: {
		good:     `{"type":"RUN_STARTED","threadId":"t1","runId":"r1","parentRunId":"r0","protocolVersion":"1.0","input":{"threadId":"t1","runId":"r1","messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"state":{},"forwardedProps":null}}`,
		required: []string{"threadId", "runId"},
		wrong:    map[string]string{"threadId": notString, "runId": notString, "parentRunId": notString, "protocolVersion": notString, "input": notObject},
	},
	agui.TypeRunFinished: {
		good:     `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1","result":{"answer":42},"outcome":{"type":"success"},"usage":[{"inputTokens":3}]}`,
		required: []string{"threadId", "runId"},
		wrong:    map[string]string{"threadId": notString, "runId": notString, "outcome": notObject, "usage": notArray},
	},
	agui.TypeRunError: {
		good:     `{"type":"RUN_ERROR","message":"boom","code":"E1","usage":[]}`,
		required: []string{"message"},
		wrong:    map[string]string{"message": notString, "code": notString, "usage": notArray},
	},
	agui.TypeStepStarted: {
		good:     `{"type":"STEP_STARTED","stepName":"plan"}`,
		required: []string{"stepName"},
		wrong:    map[string]string{"stepName": notString},
	},
	agui.TypeStepFinished: {
		good:     `{"type":"STEP_FINISHED","stepName":"plan"}`,
		required: []string{"stepName"},
		wrong:    map[string]string{"stepName": notString},
	},
	agui.TypeTextMessageStart: {
		good:     `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","name":"bot"}`,
		required: []string{"messageId"},
		wrong:    map[string]string{"messageId": notString, "role": `"tool"`, "name": notString},
	},
	agui.TypeTextMessageContent: {
		good:     `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hello"}`,
		required: []string{"messageId", "delta"},
		wrong:    map[string]string{"messageId": notString, "delta": notString},
	},
	agui.TypeTextMessageEnd: {
		good:     `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		required: []string{"messageId"},
		wrong:    map[string]string{"messageId": notString},
	},
	agui.TypeTextMessageChunk: {
		good:  `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"user","delta":"Hi","name":"me"}`,
		wrong: map[string]string{"messageId": notString, "role": `"reasoning"`, "delta": notString, "name": notString},
	},
	agui.TypeToolCallStart: {
		good:     `{"type":"TOOL_CALL_START","toolCallId":"tc1","toolCallName":"search","parentMessageId":"m1"}`,
		required: []string{"toolCallId", "toolCallName"},
		wrong:    map[string]string{"toolCallId": notString, "toolCallName": notString, "parentMessageId": notString},
	},
	agui.TypeToolCallArgs: {
		good:     `{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":"{\"q\":"}`,
		required: []string{"toolCallId", "delta"},
		wrong:    map[string]string{"toolCallId": notString, "delta": notString},
	},
	agui.TypeToolCallEnd: {
		good:     `{"type":"TOOL_CALL_END","toolCallId":"tc1"}`,
		required: []string{"toolCallId"},
		wrong:    map[string]string{"toolCallId": notString},
	},
	agui.TypeToolCallChunk: {
		good:  `{"type":"TOOL_CALL_CHUNK","toolCallId":"tc1","toolCallName":"search","parentMessageId":"m1","delta":"{}"}`,
		wrong: map[string]string{"toolCallId": notString, "toolCallName": notString, "parentMessageId": notString, "delta": notString},
	},
	agui.TypeToolCallResult: {
		good:     `{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":"sunny","role":"tool"}`,
		required: []string{"messageId", "toolCallId", "content"},
		wrong:    map[string]string{"messageId": notString, "toolCallId": notString, "content": `{"text":"x"}`, "role": `"assistant"`},
	},
	agui.TypeStateSnapshot: {
		good:     `{"type":"STATE_SNAPSHOT","snapshot":{"count":1}}`,
		required: []string{"snapshot"},
	},
	agui.TypeStateDelta: {
		good:     `{"type":"STATE_DELTA","delta":[{"op":"replace","path":"/count","value":2}]}`,
		required: []string{"delta"},
		wrong:    map[string]string{"delta": notArray},
	},
	agui.TypeMessagesSnapshot: {
		good:     `{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"hi"},{"id":"a1","role":"assistant","toolCalls":[{"id":"tc1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"id":"t1","role":"tool","toolCallId":"tc1","content":"ok"}]}`,
		required: []string{"messages"},
		wrong:    map[string]string{"messages": notArray},
	},
	agui.TypeActivitySnapshot: {
		good:     `{"type":"ACTIVITY_SNAPSHOT","messageId":"a1","activityType":"PLAN","content":{"steps":[]},"replace":false}`,
		required: []string{"messageId", "activityType", "content"},
		wrong:    map[string]string{"messageId": notString, "activityType": notString, "content": notObject, "replace": notBool},
	},
	agui.TypeActivityDelta: {
		good:     `{"type":"ACTIVITY_DELTA","messageId":"a1","activityType":"PLAN","patch":[{"op":"add","path":"/steps/0","value":"x"}]}`,
		required: []string{"messageId", "activityType", "patch"},
		wrong:    map[string]string{"messageId": notString, "activityType": notString, "patch": notArray},
	},
	agui.TypeRaw: {
		good:     `{"type":"RAW","event":{"native":true},"source":"openai"}`,
		required: []string{"event"},
		wrong:    map[string]string{"source": notString},
	},
	agui.TypeCustom: {
		good:     `{"type":"CUSTOM","name":"on_interrupt","value":[1,2]}`,
		required: []string{"name", "value"},
		wrong:    map[string]string{"name": notString},
	},
	agui.TypeReasoningStart: {
		good:     `{"type":"REASONING_START","messageId":"rs1"}`,
		required: []string{"messageId"},
		wrong:    map[string]string{"messageId": notString},
	},
	agui.TypeReasoningMessageStart: {
		good:     `{"type":"REASONING_MESSAGE_START","messageId":"rm1","role":"reasoning"}`,
		required: []string{"messageId", "role"},
		wrong:    map[string]string{"messageId": notString, "role": `"user"`},
	},
	agui.TypeReasoningMessageContent: {
		good:     `{"type":"REASONING_MESSAGE_CONTENT","messageId":"rm1","delta":"thinking"}`,
		required: []string{"messageId", "delta"},
		wrong:    map[string]string{"messageId": notString, "delta": notString},
	},
	agui.TypeReasoningMessageEnd: {
		good:     `{"type":"REASONING_MESSAGE_END","messageId":"rm1"}`,
		required: []string{"messageId"},
		wrong:    map[string]string{"messageId": notString},
	},
	agui.TypeReasoningMessageChunk: {
		good:  `{"type":"REASONING_MESSAGE_CHUNK","messageId":"rm1","delta":"x"}`,
		wrong: map[string]string{"messageId": notString, "delta": notString},
	},
	agui.TypeReasoningEnd: {
		good:     `{"type":"REASONING_END","messageId":"rs1"}`,
		required: []string{"messageId"},
		wrong:    map[string]string{"messageId": notString},
	},
	agui.TypeReasoningEncryptedValue: {
		good:     `{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"m1","encryptedValue":"b64","encryptedValueType":"sig"}`,
		required: []string{"subtype", "entityId", "encryptedValue"},
		wrong:    map[string]string{"subtype": `"thought"`, "entityId": notString, "encryptedValue": notString, "encryptedValueType": notString},
	},
	agui.TypeSubagentStarted: {
		good:     `{"type":"SUBAGENT_STARTED","subagentRunId":"s1","name":"researcher","description":"d","parentSubagentRunId":"s0","parentToolCallId":"c1","parentMessageId":"m1"}`,
		required: []string{"subagentRunId", "name"},
		wrong:    map[string]string{"name": notString, "description": notString, "parentSubagentRunId": notString, "parentToolCallId": notString, "parentMessageId": notString},
	},
	agui.TypeSubagentFinished: {
		good:     `{"type":"SUBAGENT_FINISHED","subagentRunId":"s1","result":{"a":null},"outcome":{"type":"suspended","interruptIds":["i1"]}}`,
		required: []string{"subagentRunId"},
		wrong:    map[string]string{"outcome": `{"type":"interrupt"}`},
	},
	agui.TypeSubagentError: {
		good:     `{"type":"SUBAGENT_ERROR","subagentRunId":"s1","message":"boom","code":"E1"}`,
		required: []string{"subagentRunId", "message"},
		wrong:    map[string]string{"message": notString, "code": notString},
	},
	agui.TypeThinkingStart: {
		good:  `{"type":"THINKING_START","title":"pondering"}`,
		wrong: map[string]string{"title": notString},
	},
	agui.TypeThinkingEnd: {
		good: `{"type":"THINKING_END"}`,
	},
	agui.TypeThinkingTextMessageStart: {
		good: `{"type":"THINKING_TEXT_MESSAGE_START"}`,
	},
	agui.TypeThinkingTextMessageContent: {
		good:     `{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"hmm"}`,
		required: []string{"delta"},
		wrong:    map[string]string{"delta": notString},
	},
	agui.TypeThinkingTextMessageEnd: {
		good: `{"type":"THINKING_TEXT_MESSAGE_END"}`,
	},
}

// allTypes is every event type constant the package declares.
var allTypes = []string{
	agui.TypeRunStarted, agui.TypeRunFinished, agui.TypeRunError,
	agui.TypeStepStarted, agui.TypeStepFinished,
	agui.TypeTextMessageStart, agui.TypeTextMessageContent, agui.TypeTextMessageEnd, agui.TypeTextMessageChunk,
	agui.TypeToolCallStart, agui.TypeToolCallArgs, agui.TypeToolCallEnd, agui.TypeToolCallChunk, agui.TypeToolCallResult,
	agui.TypeStateSnapshot, agui.TypeStateDelta, agui.TypeMessagesSnapshot,
	agui.TypeActivitySnapshot, agui.TypeActivityDelta,
	agui.TypeRaw, agui.TypeCustom,
	agui.TypeReasoningStart, agui.TypeReasoningMessageStart, agui.TypeReasoningMessageContent,
	agui.TypeReasoningMessageEnd, agui.TypeReasoningMessageChunk, agui.TypeReasoningEnd, agui.TypeReasoningEncryptedValue,
	agui.TypeSubagentStarted, agui.TypeSubagentFinished, agui.TypeSubagentError,
	agui.TypeThinkingStart, agui.TypeThinkingEnd, agui.TypeThinkingTextMessageStart,
	agui.TypeThinkingTextMessageContent, agui.TypeThinkingTextMessageEnd,
}

func TestEveryKnownTypeHasACase(t *testing.T) {
	known := agui.SchemaTypes()
	slices.Sort(known)
	declared := slices.Clone(allTypes)
	slices.Sort(declared)
	if !slices.Equal(known, declared) {
		t.Errorf("known types %v\ndeclared constants %v", known, declared)
	}
	for _, typ := range allTypes {
		if !agui.IsKnown(typ) {
			t.Errorf("IsKnown(%s) = false", typ)
		}
		if _, ok := typeCases[typ]; !ok {
			t.Errorf("no validation case for %s", typ)
		}
	}
	for _, typ := range []string{"", "SUBAGENT_PAUSED", "run_started", "TEXT_MESSAGE"} {
		if agui.IsKnown(typ) {
			t.Errorf("IsKnown(%q) = true", typ)
		}
	}
}

// with returns event (a JSON object) with key set to value, or removed
// when value is "".
func with(t *testing.T, event, key, value string) json.RawMessage {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(event), &obj); err != nil {
		t.Fatalf("bad test event %s: %v", event, err)
	}
	if value == "" {
		delete(obj, key)
	} else {
		obj[key] = json.RawMessage(value)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withCommon adds the common optional fields to a good event.
func withCommon(good string) string {
	c := commonGood
	if strings.Contains(good, `"subagentRunId"`) { // a subagent's own event names it already
		c = strings.TrimSuffix(c, `,"subagentRunId":"sub-1"`)
	}
	return strings.TrimSuffix(good, "}") + "," + c + "}"
}

func mustValid(t *testing.T, raw json.RawMessage) agui.Info {
	t.Helper()
	info, err := agui.Validate(raw)
	if err != nil {
		t.Fatalf("Validate(%s): %v", raw, err)
	}
	return info
}

func mustMalformed(t *testing.T, raw json.RawMessage) {
	t.Helper()
	_, err := agui.Validate(raw)
	if err == nil {
		t.Fatalf("Validate(%s) accepted a malformed event", raw)
	}
	if !errors.Is(err, agui.ErrMalformed) {
		t.Fatalf("Validate(%s) error %v does not wrap ErrMalformed", raw, err)
	}
}

func TestValidateKnownTypes(t *testing.T) {
	for typ, tc := range typeCases {
		t.Run(typ, func(t *testing.T) {
			good := withCommon(tc.good)
			t.Run("good", func(t *testing.T) {
				info := mustValid(t, json.RawMessage(good))
				if info.Type != typ || !info.Known {
					t.Errorf("info = %+v", info)
				}
				mustValid(t, json.RawMessage(tc.good)) // without the common fields
			})
			t.Run("extra key", func(t *testing.T) {
				mustValid(t, with(t, good, "somethingNewer", `{"x":[1,null]}`))
			})
			t.Run("only required", func(t *testing.T) {
				var obj map[string]json.RawMessage
				_ = json.Unmarshal([]byte(good), &obj)
				min := map[string]json.RawMessage{"type": obj["type"]}
				for _, k := range tc.required {
					min[k] = obj[k]
				}
				b, _ := json.Marshal(min)
				mustValid(t, b)
			})
			for _, k := range tc.required {
				t.Run("missing "+k, func(t *testing.T) {
					mustMalformed(t, with(t, good, k, ""))
				})
			}
			wrong := map[string]string{}
			for k, v := range common {
				if k == "subagentRunId" && runScoped[typ] {
					continue // an extra key there (TestValidateRunScopedEventsNameNoSubagent)
				}
				wrong[k] = v
			}
			for k, v := range tc.wrong {
				wrong[k] = v
			}
			for k, v := range wrong {
				t.Run("wrong "+k, func(t *testing.T) {
					mustMalformed(t, with(t, good, k, v))
				})
			}
			// Optional fields may be null; required typed ones may not.
			var obj map[string]json.RawMessage
			_ = json.Unmarshal([]byte(good), &obj)
			for k := range obj {
				if k == "type" {
					continue
				}
				req := slices.Contains(tc.required, k)
				_, typed := wrong[k]
				t.Run("null "+k, func(t *testing.T) {
					raw := with(t, good, k, "null")
					if req && typed {
						mustMalformed(t, raw)
					} else {
						mustValid(t, raw)
					}
				})
			}
		})
	}
}

func TestValidateNotAnEvent(t *testing.T) {
	cases := map[string]string{
		"empty":              ``,
		"invalid JSON":       `{"type":"RUN_STARTED"`,
		"trailing garbage":   `{"type":"CUSTOM_X"} x`,
		"null":               `null`,
		"array":              `[{"type":"RUN_STARTED"}]`,
		"string":             `"RUN_STARTED"`,
		"number":             `7`,
		"no type":            `{"threadId":"t1","runId":"r1"}`,
		"null type":          `{"type":null}`,
		"numeric type":       `{"type":7}`,
		"object type":        `{"type":{"name":"RUN_STARTED"}}`,
		"array type":         `{"type":["RUN_STARTED"]}`,
		"boolean type":       `{"type":true}`,
		"known, no fields":   `{"type":"RUN_STARTED"}`,
		"known, wrong field": `{"type":"TOOL_CALL_END","toolCallId":false}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			mustMalformed(t, json.RawMessage(in))
		})
	}
}

func TestValidateUnknownTypePassesThrough(t *testing.T) {
	for _, in := range []string{
		`{"type":"SUBAGENT_PAUSED","subagentRunId":"s1","name":"researcher"}`,
		`{"type":"run_started"}`,
		`{"type":""}`,
		`{"type":"FUTURE_EVENT","timestamp":"not checked","metadata":7,"anything":null}`,
	} {
		info := mustValid(t, json.RawMessage(in))
		if info.Known || info.RunFinished || info.RunError || info.Interrupts != nil {
			t.Errorf("Validate(%s) = %+v, want an unknown type and nothing else", in, info)
		}
		var want struct{ Type string }
		_ = json.Unmarshal([]byte(in), &want)
		if info.Type != want.Type {
			t.Errorf("Type = %q, want %q", info.Type, want.Type)
		}
	}
}

func TestValidateRunFinishedOutcome(t *testing.T) {
	const base = `{"type":"RUN_FINISHED","threadId":"t1","runId":"r1"`
	interrupts := `[{"id":"int-1","reason":"tool_call","toolCallId":"tc-9","message":"Send?","responseSchema":{"type":"object"},"expiresAt":"2030-01-01T00:00:00Z","metadata":{"k":1}},{"id":"int-2","reason":"input_required"}]`
	good := map[string]string{
		"no outcome":        base + `}`,
		"null outcome":      base + `,"outcome":null,"result":null}`,
		"success":           base + `,"outcome":{"type":"success"}}`,
		"success pending":   base + `,"outcome":{"type":"success","pendingToolCallIds":["tc1"]}}`,
		"cancelled":         base + `,"outcome":{"type":"cancelled"}}`,
		"unknown outcome":   base + `,"outcome":{"type":"handed-off","to":"x"}}`,
		"interrupt":         base + `,"outcome":{"type":"interrupt","interrupts":` + interrupts + `}}`,
		"interrupt + extra": base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","custom":true}],"note":1}}`,
	}
	for name, in := range good {
		t.Run(name, func(t *testing.T) {
			info := mustValid(t, json.RawMessage(in))
			if !info.RunFinished || info.RunError {
				t.Errorf("info = %+v", info)
			}
			isInterrupt := strings.HasPrefix(name, "interrupt")
			if (info.Interrupts != nil) != isInterrupt {
				t.Errorf("Interrupts = %s", info.Interrupts)
			}
		})
	}
	info := mustValid(t, json.RawMessage(good["interrupt"]))
	if string(info.Interrupts) != interrupts {
		t.Errorf("Interrupts = %s\nwant %s", info.Interrupts, interrupts)
	}

	bad := map[string]string{
		"outcome string":           base + `,"outcome":"interrupt"}`,
		"outcome array":            base + `,"outcome":[]}`,
		"outcome without type":     base + `,"outcome":{"interrupts":[]}}`,
		"outcome numeric type":     base + `,"outcome":{"type":1}}`,
		"interrupt no interrupts":  base + `,"outcome":{"type":"interrupt"}}`,
		"interrupt null list":      base + `,"outcome":{"type":"interrupt","interrupts":null}}`,
		"interrupt empty list":     base + `,"outcome":{"type":"interrupt","interrupts":[]}}`,
		"interrupt list object":    base + `,"outcome":{"type":"interrupt","interrupts":{"id":"i","reason":"r"}}}`,
		"interrupt item string":    base + `,"outcome":{"type":"interrupt","interrupts":["i"]}}`,
		"interrupt no id":          base + `,"outcome":{"type":"interrupt","interrupts":[{"reason":"r"}]}}`,
		"interrupt no reason":      base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i"}]}}`,
		"interrupt id number":      base + `,"outcome":{"type":"interrupt","interrupts":[{"id":1,"reason":"r"}]}}`,
		"interrupt toolCallId num": base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","toolCallId":5}]}}`,
		"interrupt schema string":  base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","responseSchema":"{}"}]}}`,
		"interrupt expires number": base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r","expiresAt":1}]}}`,
		"second interrupt bad":     base + `,"outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r"},{"id":"j"}]}}`,
		"pending not strings":      base + `,"outcome":{"type":"success","pendingToolCallIds":[1]}}`,
		"pending not array":        base + `,"outcome":{"type":"success","pendingToolCallIds":"tc1"}}`,
		"usage item not object":    base + `,"usage":[1]}`,
	}
	for name, in := range bad {
		t.Run(name, func(t *testing.T) {
			mustMalformed(t, json.RawMessage(in))
		})
	}
}

func TestValidateRunError(t *testing.T) {
	info := mustValid(t, json.RawMessage(`{"type":"RUN_ERROR","message":"the agent's stream ended","code":"provider_stream_ended_without_finishing"}`))
	if !info.RunError || info.RunFinished || info.ErrorMessage != "the agent's stream ended" || info.ErrorCode != "provider_stream_ended_without_finishing" {
		t.Errorf("info = %+v", info)
	}
	info = mustValid(t, json.RawMessage(`{"type":"RUN_ERROR","message":"","code":null}`))
	if !info.RunError || info.ErrorMessage != "" || info.ErrorCode != "" {
		t.Errorf("info = %+v", info)
	}
}

func TestValidateFieldDetails(t *testing.T) {
	good := []string{
		// AG-UI 1.x allows empty deltas.
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":""}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":""}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"developer"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"system"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"user"}`,
		`{"type":"TEXT_MESSAGE_CHUNK"}`,
		`{"type":"TOOL_CALL_CHUNK"}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"tc1","encryptedValue":"x"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"url","value":"https://x"}}]}`,
		`{"type":"STATE_SNAPSHOT","snapshot":null}`,
		`{"type":"STATE_SNAPSHOT","snapshot":"just a string"}`,
		`{"type":"STATE_DELTA","delta":[]}`,
		`{"type":"RAW","event":null}`,
		`{"type":"CUSTOM","name":"x","value":null}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","timestamp":1.5e12}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","timestamp":-1}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[` +
			`{"id":"d","role":"developer","content":"be brief"},` +
			`{"id":"s","role":"system","content":"sys","name":"n"},` +
			`{"id":"u","role":"user","content":[{"type":"text","text":"look"},{"type":"binary","mimeType":"image/png","url":"https://x"}]},` +
			`{"id":"a","role":"assistant"},` +
			`{"id":"a2","role":"assistant","content":"ok","toolCalls":[]},` +
			`{"id":"t","role":"tool","content":"x","toolCallId":"tc","error":"failed"},` +
			`{"id":"ac","role":"activity","activityType":"PLAN","content":{}},` +
			`{"id":"r","role":"reasoning","content":"because"},` +
			`{"id":"f","role":"future-role","whatever":1}]}`,
	}
	for _, in := range good {
		mustValid(t, json.RawMessage(in))
	}
	bad := []string{
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"tool"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"ASSISTANT"}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"m1","role":null}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":null}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":[{"type":"text"}]}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":[{"text":"no type"}]}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":["bare"]}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r"}}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","messages":[]}}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user"}]}}`,
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[],"tools":{}}}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[1]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"role":"user","content":"x"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","content":"x"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":7}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"d","role":"developer"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"s","role":"system","content":["x"]}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","content":1}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":{}}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"tc","type":"code","function":{"name":"f","arguments":""}}]}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"tc","type":"function","function":{"name":"f","arguments":{}}}]}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","toolCalls":[{"id":"tc","type":"function"}]}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"t","role":"tool","content":"x"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"t","role":"tool","content":"x","toolCallId":"tc","error":1}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"ac","role":"activity","activityType":"PLAN","content":"x"}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"r","role":"reasoning"}]}`,
		`{"type":"STATE_DELTA","delta":null}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":null}`,
	}
	for _, in := range bad {
		mustMalformed(t, json.RawMessage(in))
	}
}

func TestValidateErrorNamesTheField(t *testing.T) {
	_, err := agui.Validate(json.RawMessage(`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i","reason":"r"},{"id":"j"}]}}`))
	if err == nil || !strings.Contains(err.Error(), "outcome.interrupts[1].reason") {
		t.Errorf("error %v does not name outcome.interrupts[1].reason", err)
	}
}

// AG-UI's run-scoped events (RUN_STARTED, RUN_FINISHED, RUN_ERROR) and
// MESSAGES_SNAPSHOT carry no subagent attribution: their schemas do not
// name subagentRunId, so a member by that name is an extra key, taken
// whatever it holds, as @ag-ui/core takes it. Refusing it failed an honest
// provider's run with malformed_event.
func TestValidateRunScopedEventsNameNoSubagent(t *testing.T) {
	for _, ev := range []string{
		`{"type":"RUN_STARTED","threadId":"t","runId":"r","subagentRunId":5}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","subagentRunId":{"id":"s"}}`,
		`{"type":"RUN_ERROR","message":"m","subagentRunId":true}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[],"subagentRunId":["s"]}`,
	} {
		mustValid(t, json.RawMessage(ev))
	}
}

// TestValidateAsAGUICoreDoes: what @ag-ui/core 1.0's schemas refuse and a
// caller's official client would throw on, funduq refuses to the provider.
func TestValidateAsAGUICoreDoes(t *testing.T) {
	for _, in := range []string{
		`{"type":"STEP_STARTED","stepName":"s","timestamp":1.5}`,
		`{"type":"STEP_STARTED","stepName":"s","timestamp":9007199254740993}`,
		`{"type":"STEP_STARTED","stepName":"s","timestamp":-1e20}`,
		`{"type":"RUN_ERROR","message":"m","usage":[{"inputTokens":-1}]}`,
		`{"type":"RUN_ERROR","message":"m","usage":[{"outputTokens":2.5}]}`,
		`{"type":"RUN_ERROR","message":"m","usage":[{"model":7}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"add","value":1}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"add","path":"/a"}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"frob","path":"/a"}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"move","path":"/a"}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"remove","path":"a"}]}`,
		`{"type":"STATE_DELTA","delta":[null]}`,
		`{"type":"ACTIVITY_DELTA","messageId":"m","activityType":"p","patch":["x"]}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"image"}]}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":[{"type":"image","source":{"type":"data","value":"x"}}]}`,
		`{"type":"SUBAGENT_STARTED","name":"n"}`,
		`{"type":"SUBAGENT_FINISHED","subagentRunId":"s","outcome":{"type":"weird"}}`,
	} {
		mustMalformed(t, json.RawMessage(in))
	}
	for _, in := range []string{
		`{"type":"STEP_STARTED","stepName":"s","timestamp":1e3}`,
		`{"type":"STEP_STARTED","stepName":"s","timestamp":-9007199254740991}`,
		`{"type":"RUN_ERROR","message":"m","usage":[{"inputTokens":0,"model":"x","extra":null}]}`,
		`{"type":"STATE_DELTA","delta":[{"op":"test","path":"/a~1b","value":null},{"op":"copy","from":"","path":"/c"}]}`,
	} {
		mustValid(t, json.RawMessage(in))
	}
}
