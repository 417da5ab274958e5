package agui

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/funduq/funduq-go/core/strictjson"
)

// ErrMalformed is wrapped by every error Validate (and Fold) returns: the
// event has no string "type", is not a JSON object, or is of a known type
// and does not satisfy that type's schema.
var ErrMalformed = errors.New("agui: malformed AG-UI event")

// Info is what Validate learned about one event.
type Info struct {
	// Type is the event's "type" string ("" when it has none).
	Type string
	// Known reports whether Type is one funduq validates; an unknown type
	// is a newer AG-UI's event and is relayed untouched.
	Known bool
	// RunFinished is set for RUN_FINISHED.
	RunFinished bool
	// RunError is set for RUN_ERROR.
	RunError bool
	// Interrupts is the "interrupts" array of a RUN_FINISHED whose outcome
	// is an interrupt, exactly as the event carried it; nil otherwise.
	Interrupts json.RawMessage
	// ErrorMessage and ErrorCode are a RUN_ERROR's "message" and "code"
	// ("" when the code is absent).
	ErrorMessage, ErrorCode string
}

// Validate checks one provider event. An event that is not a JSON object or
// has no string "type" is malformed. An event of a type funduq knows (see
// IsKnown) must have its required fields, of the right JSON types, and its
// optional fields, when present and not null, of the right types; keys the
// schema does not name are allowed. An event of any other string type is
// not malformed: Info.Known is false and nothing else is checked. Every
// error wraps ErrMalformed and names the offending field; the Info returned
// with it still carries Type and Known when the event had a string type.
// Go's JSON decoder refuses nesting deeper than 10000 levels, so such an
// event is malformed too.
func Validate(raw json.RawMessage) (Info, error) {
	info, _, err := validate(raw)
	return info, err
}

// validate is Validate, also returning the event's decoded fields (nil
// when it is not an object).
func validate(raw json.RawMessage) (Info, map[string]json.RawMessage, error) {
	if !json.Valid(raw) {
		return Info{}, nil, fmt.Errorf("%w: not valid JSON", ErrMalformed)
	}
	// Valid JSON that PostgreSQL cannot hold: its jsonb (a pause's
	// interrupts) refuses \u0000, a lone escaped surrogate and a number
	// beyond numeric's range, and its text refuses bytes that are not
	// UTF-8, so a write carrying them could never land.
	if !utf8.Valid(raw) {
		return Info{}, nil, fmt.Errorf("%w: not valid UTF-8", ErrMalformed)
	}
	if why := strictjson.Unstorable(raw); why != "" {
		return Info{}, nil, fmt.Errorf("%w: %s, which funduq cannot store", ErrMalformed, why)
	}
	obj, ok := decodeObject(raw)
	if !ok {
		return Info{}, nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	typRaw, ok := obj["type"]
	if !ok {
		return Info{}, obj, fmt.Errorf("%w: no \"type\"", ErrMalformed)
	}
	typ, ok := stringField(obj, "type")
	if !ok {
		return Info{}, obj, fmt.Errorf("%w: \"type\" is %s, not a string", ErrMalformed, kindName(kindOf(typRaw)))
	}
	info := Info{Type: typ}
	fields, known := schemas[typ]
	if err := caseVariant(obj, typeField); err != nil { // whatever the type
		return info, obj, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !known {
		return info, obj, nil
	}
	info.Known = true
	named := attribution
	if runScoped[typ] {
		named = nil
	}
	if err := caseVariant(obj, commonFields, named, fields, typeField); err != nil {
		return info, obj, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
	}
	if err := checkFields(obj, commonFields); err != nil {
		return info, obj, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
	}
	if !runScoped[typ] {
		if err := checkFields(obj, attribution); err != nil {
			return info, obj, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
		}
	}
	if err := checkFields(obj, fields); err != nil {
		return info, obj, fmt.Errorf("%w: %s: %v", ErrMalformed, typ, err)
	}
	switch typ {
	case TypeRunFinished:
		info.RunFinished = true
		info.Interrupts = interruptsOf(obj)
	case TypeRunError:
		info.RunError = true
		info.ErrorMessage, _ = stringField(obj, "message")
		info.ErrorCode, _ = stringField(obj, "code")
	}
	return info, obj, nil
}

// interruptsOf returns the interrupts array of a RUN_FINISHED event's
// interrupt outcome, or nil.
func interruptsOf(event map[string]json.RawMessage) json.RawMessage {
	outcome, ok := decodeObject(event["outcome"])
	if !ok {
		return nil
	}
	if t, _ := stringField(outcome, "type"); t != "interrupt" {
		return nil
	}
	if kindOf(outcome["interrupts"]) != kindArray {
		return nil
	}
	return outcome["interrupts"]
}

// A field is one key of a schema. A nil check accepts any JSON value.
type field struct {
	name     string
	required bool
	check    check
}

// A check inspects one present, syntactically valid JSON value.
type check func(json.RawMessage) error

func req(name string, c check) field { return field{name: name, required: true, check: c} }
func opt(name string, c check) field { return field{name: name, check: c} }

// problem is a validation failure at a path inside the event.
type problem struct {
	path, msg string
}

func (p *problem) Error() string {
	if p.path == "" {
		return p.msg
	}
	return p.path + " " + p.msg
}

// at prefixes err's path with seg (a field name, or "[i]" for an index).
func at(seg string, err error) error {
	var p *problem
	if !errors.As(err, &p) {
		return err
	}
	switch {
	case p.path == "":
		p.path = seg
	case strings.HasPrefix(p.path, "["):
		p.path = seg + p.path
	default:
		p.path = seg + "." + p.path
	}
	return p
}

// caseVariant refuses a member named like one of the fields of lists but
// not exactly ("Delta" beside or instead of "delta"): a door reads some
// stored events into Go structs, whose matching ignores case, and would
// read such a member as the field (design.md §The provider wire, "Exact
// names"). A member of any other name is the event's own and is let
// through. Each member is compared with each field name (a byte or two
// for most pairs), in the same pass as the rest of the validation.
func caseVariant(obj map[string]json.RawMessage, lists ...[]field) error {
	for k := range obj {
		for _, fields := range lists {
			for _, f := range fields {
				if k != f.name && strings.EqualFold(k, f.name) {
					return &problem{msg: fmt.Sprintf("member %q differs from %q only in case", k, f.name)}
				}
			}
		}
	}
	return nil
}

// typeField is the one field every event has, known type or not.
var typeField = []field{{name: "type"}}

func checkFields(obj map[string]json.RawMessage, fields []field) error {
	for _, f := range fields {
		raw, present := obj[f.name]
		if !present {
			if f.required {
				return &problem{path: f.name, msg: "is required"}
			}
			continue
		}
		if !f.required && kindOf(raw) == kindNull {
			continue
		}
		if f.check == nil {
			continue
		}
		if err := f.check(raw); err != nil {
			return at(f.name, err)
		}
	}
	return nil
}

func kindName(k byte) string {
	switch k {
	case kindString:
		return "a string"
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	case kindNumber:
		return "a number"
	}
	return "empty"
}

func want(k byte) check {
	return func(raw json.RawMessage) error {
		if got := kindOf(raw); got != k {
			return &problem{msg: "must be " + kindName(k) + ", is " + kindName(got)}
		}
		return nil
	}
}

var (
	isString = want(kindString)
	isNumber = want(kindNumber)
	isBool   = want(kindBool)
	isObject = want(kindObject)
	isArray  = want(kindArray)
)

// maxSafe is 2^53-1, the largest integer a JavaScript number holds
// exactly; AG-UI's schema bounds its integers (timestamps, token counts)
// by it.
const maxSafe = 1<<53 - 1

// safeInt accepts an integral JSON number within ±maxSafe (from 0 when
// nonNegative), as @ag-ui/core 1.0's z.int() does: a timestamp of 1.5 or
// 1e300 makes the caller's client refuse the whole stream.
func safeInt(nonNegative bool) check {
	return func(raw json.RawMessage) error {
		if err := isNumber(raw); err != nil {
			return err
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafe {
			return &problem{msg: fmt.Sprintf("must be an integer within ±%d, is %s", int64(maxSafe), raw)}
		}
		if nonNegative && f < 0 {
			return &problem{msg: fmt.Sprintf("must not be negative, is %s", raw)}
		}
		return nil
	}
}

// oneOf accepts a string equal to one of values.
func oneOf(values ...string) check {
	return func(raw json.RawMessage) error {
		if err := isString(raw); err != nil {
			return err
		}
		var s string
		_ = json.Unmarshal(raw, &s)
		for _, v := range values {
			if s == v {
				return nil
			}
		}
		return &problem{msg: fmt.Sprintf("must be one of %q, is %q", values, s)}
	}
}

// arrayOf accepts an array whose items all pass item; nonEmpty also
// requires at least one item.
func arrayOf(item check, nonEmpty bool) check {
	return func(raw json.RawMessage) error {
		arr, ok := decodeArray(raw)
		if !ok {
			return isArray(raw)
		}
		if nonEmpty && len(arr) == 0 {
			return &problem{msg: "must not be empty"}
		}
		for i, v := range arr {
			if err := item(v); err != nil {
				return at(fmt.Sprintf("[%d]", i), err)
			}
		}
		return nil
	}
}

// objectWith accepts an object satisfying fields.
func objectWith(fields ...field) check {
	return func(raw json.RawMessage) error {
		obj, ok := decodeObject(raw)
		if !ok {
			return isObject(raw)
		}
		if err := caseVariant(obj, fields); err != nil {
			return err
		}
		return checkFields(obj, fields)
	}
}

// commonFields are the optional fields every event may carry.
var commonFields = []field{
	opt("timestamp", safeInt(false)),
	opt("rawEvent", nil),
	opt("metadata", isObject),
}

// attribution is the subagent an event belongs to, on every event but the
// run-scoped ones (runScoped): AG-UI's schemas for those do not name
// subagentRunId, so there a member by that name is an extra key, taken as
// any other is.
var attribution = []field{opt("subagentRunId", isString)}

var runScoped = map[string]bool{
	TypeRunStarted:       true,
	TypeRunFinished:      true,
	TypeRunError:         true,
	TypeMessagesSnapshot: true,
	// A subagent's own events name it as a required member.
	TypeSubagentStarted:  true,
	TypeSubagentFinished: true,
	TypeSubagentError:    true,
}

var textMessageRole = oneOf("developer", "system", "assistant", "user")

// contentPart is one part of a multimodal message body. Part kinds differ
// between AG-UI versions (0.x "binary"; 1.x "image", "audio", "video",
// "document"), so only the discriminator and a text part's text are checked.
func contentPart(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := caseVariant(obj, outcomeFields); err != nil {
		return err
	}
	if err := checkFields(obj, []field{req("type", isString)}); err != nil {
		return err
	}
	switch t, _ := stringField(obj, "type"); t {
	case "text":
		return checkFields(obj, []field{req("text", isString), opt("id", isString)})
	case "image", "audio", "video", "document":
		return checkFields(obj, []field{req("source", partSource), opt("id", isString)})
	}
	return nil
}

// partSource is a 1.x media part's source: inline data (with its MIME
// type), a URL or a file reference.
func partSource(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := checkFields(obj, []field{req("type", oneOf("data", "url", "file")), req("value", isString), opt("mimeType", isString)}); err != nil {
		return err
	}
	switch t, _ := stringField(obj, "type"); t {
	case "data":
		return checkFields(obj, []field{req("mimeType", isString)})
	case "file":
		return checkFields(obj, []field{opt("provider", isString)})
	}
	return nil
}

// stringOrParts accepts a string or an array of content parts.
func stringOrParts(raw json.RawMessage) error {
	if kindOf(raw) == kindString {
		return nil
	}
	if kindOf(raw) != kindArray {
		return &problem{msg: "must be a string or an array, is " + kindName(kindOf(raw))}
	}
	return arrayOf(contentPart, false)(raw)
}

var toolCall = objectWith(
	req("id", isString),
	req("type", oneOf("function")),
	req("function", objectWith(req("name", isString), req("arguments", isString))),
)

// message checks an AG-UI Message, discriminated by role. A role this
// package does not know (a newer AG-UI's) is checked for id and role only.
func message(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := checkFields(obj, []field{req("id", isString), req("role", isString)}); err != nil {
		return err
	}
	role, _ := stringField(obj, "role")
	var fields []field
	switch role {
	case "developer", "system":
		fields = []field{req("content", isString), opt("name", isString)}
	case "assistant":
		fields = []field{opt("content", isString), opt("toolCalls", arrayOf(toolCall, false)), opt("name", isString)}
	case "user":
		fields = []field{req("content", stringOrParts), opt("name", isString)}
	case "tool":
		fields = []field{req("content", stringOrParts), req("toolCallId", isString), opt("error", isString)}
	case "activity":
		fields = []field{req("activityType", isString), req("content", isObject)}
	case "reasoning":
		fields = []field{req("content", isString)}
	}
	return checkFields(obj, fields)
}

var messages = arrayOf(message, false)

// runAgentInput checks the RunAgentInput a RUN_STARTED may echo, with the
// requirements AG-UI 1.x keeps (0.x also required state, tools, context
// and forwardedProps).
var runAgentInput = objectWith(
	req("threadId", isString),
	req("runId", isString),
	req("messages", messages),
	opt("parentRunId", isString),
	opt("tools", isArray),
	opt("context", isArray),
	opt("resume", isArray),
)

var interrupt = objectWith(
	req("id", isString),
	req("reason", isString),
	opt("message", isString),
	opt("toolCallId", isString),
	opt("responseSchema", isObject),
	opt("expiresAt", isString),
	opt("metadata", isObject),
	opt("subagentRunId", isString),
)

// outcome checks RUN_FINISHED.outcome. An outcome type this package does
// not know is accepted: AG-UI tells receivers to treat it as success.
func outcome(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := caseVariant(obj, outcomeFields); err != nil {
		return err
	}
	if err := checkFields(obj, []field{req("type", isString)}); err != nil {
		return err
	}
	switch t, _ := stringField(obj, "type"); t {
	case "interrupt":
		return checkFields(obj, []field{req("interrupts", arrayOf(interrupt, true))})
	case "success":
		return checkFields(obj, []field{opt("pendingToolCallIds", arrayOf(isString, false))})
	}
	return nil
}

// outcomeFields are every outcome's member names, for caseVariant.
var outcomeFields = []field{{name: "type"}, {name: "interrupts"}, {name: "pendingToolCallIds"}}

// usage is RUN_FINISHED's and RUN_ERROR's token usage, as AG-UI 1.0's
// TokenUsage types it.
var usage = arrayOf(objectWith(
	opt("provider", isString),
	opt("model", isString),
	opt("inputTokens", safeInt(true)),
	opt("outputTokens", safeInt(true)),
	opt("totalTokens", safeInt(true)),
	opt("reasoningTokens", safeInt(true)),
	opt("cachedInputTokens", safeInt(true)),
	opt("cacheWriteInputTokens", safeInt(true)),
), false)

// jsonPointer is RFC 6901's syntax, as AG-UI 1.0's JsonPointer checks it.
var jsonPointer = regexp.MustCompile(`^(/([^/~]|~[01])*)*$`)

func isPointer(raw json.RawMessage) error {
	if err := isString(raw); err != nil {
		return err
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	if !jsonPointer.MatchString(s) {
		return &problem{msg: fmt.Sprintf("must be a JSON Pointer, is %q", s)}
	}
	return nil
}

// patchOp checks one JSON Patch operation (RFC 6902) as AG-UI 1.0's
// JsonPatchOperation does: a known op, a pointer path, a from for move
// and copy, a value (null included) for add, replace and test.
func patchOp(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := checkFields(obj, []field{req("op", oneOf("add", "remove", "replace", "move", "copy", "test")), req("path", isPointer)}); err != nil {
		return err
	}
	switch op, _ := stringField(obj, "op"); op {
	case "move", "copy":
		return checkFields(obj, []field{req("from", isPointer)})
	case "add", "replace", "test":
		if _, ok := obj["value"]; !ok {
			return &problem{path: "value", msg: "is required"}
		}
	}
	return nil
}

var jsonPatch = arrayOf(patchOp, false)

// subagentOutcome checks SUBAGENT_FINISHED.outcome.
var subagentOutcome = func(raw json.RawMessage) error {
	obj, ok := decodeObject(raw)
	if !ok {
		return isObject(raw)
	}
	if err := checkFields(obj, []field{req("type", oneOf("success", "suspended"))}); err != nil {
		return err
	}
	return checkFields(obj, []field{opt("interruptIds", arrayOf(isString, false))})
}

// schemas holds, per known event type, the fields beyond commonFields.
var schemas = map[string][]field{
	TypeRunStarted: {
		req("threadId", isString),
		req("runId", isString),
		opt("parentRunId", isString),
		opt("input", runAgentInput),
		opt("protocolVersion", isString),
	},
	TypeRunFinished: {
		req("threadId", isString),
		req("runId", isString),
		opt("result", nil),
		opt("outcome", outcome),
		opt("usage", usage),
	},
	TypeRunError: {
		req("message", isString),
		opt("code", isString),
		opt("usage", usage),
	},
	TypeStepStarted:  {req("stepName", isString)},
	TypeStepFinished: {req("stepName", isString)},

	TypeTextMessageStart: {
		req("messageId", isString),
		opt("role", textMessageRole),
		opt("name", isString),
	},
	// AG-UI 1.x allows an empty delta (keep-alives); 0.x SDKs required one
	// character. Any string is accepted.
	TypeTextMessageContent: {req("messageId", isString), req("delta", isString)},
	TypeTextMessageEnd:     {req("messageId", isString)},
	TypeTextMessageChunk: {
		opt("messageId", isString),
		opt("role", textMessageRole),
		opt("delta", isString),
		opt("name", isString),
	},

	TypeToolCallStart: {
		req("toolCallId", isString),
		req("toolCallName", isString),
		opt("parentMessageId", isString),
	},
	TypeToolCallArgs: {req("toolCallId", isString), req("delta", isString)},
	TypeToolCallEnd:  {req("toolCallId", isString)},
	TypeToolCallChunk: {
		opt("toolCallId", isString),
		opt("toolCallName", isString),
		opt("parentMessageId", isString),
		opt("delta", isString),
	},
	TypeToolCallResult: {
		req("messageId", isString),
		req("toolCallId", isString),
		req("content", stringOrParts),
		opt("role", oneOf("tool")),
	},

	TypeStateSnapshot:    {req("snapshot", nil)},
	TypeStateDelta:       {req("delta", jsonPatch)},
	TypeMessagesSnapshot: {req("messages", messages)},

	TypeActivitySnapshot: {
		req("messageId", isString),
		req("activityType", isString),
		req("content", isObject),
		opt("replace", isBool),
	},
	TypeActivityDelta: {
		req("messageId", isString),
		req("activityType", isString),
		req("patch", jsonPatch),
	},

	TypeRaw:    {req("event", nil), opt("source", isString)},
	TypeCustom: {req("name", isString), req("value", nil)},

	TypeReasoningStart: {req("messageId", isString)},
	// AG-UI's TypeScript SDK and 1.x schema fix this role to "reasoning";
	// a Python SDK release declared "assistant". Both are accepted.
	TypeReasoningMessageStart:   {req("messageId", isString), req("role", oneOf("reasoning", "assistant"))},
	TypeReasoningMessageContent: {req("messageId", isString), req("delta", isString)},
	TypeReasoningMessageEnd:     {req("messageId", isString)},
	TypeReasoningMessageChunk:   {opt("messageId", isString), opt("delta", isString)},
	TypeReasoningEnd:            {req("messageId", isString)},
	TypeReasoningEncryptedValue: {
		req("subtype", oneOf("tool-call", "message")),
		req("entityId", isString),
		req("encryptedValue", isString),
		opt("encryptedValueType", isString),
	},

	TypeSubagentStarted: {
		req("subagentRunId", isString),
		req("name", isString),
		opt("description", isString),
		opt("parentSubagentRunId", isString),
		opt("parentToolCallId", isString),
		opt("parentMessageId", isString),
	},
	TypeSubagentFinished: {
		req("subagentRunId", isString),
		opt("result", nil),
		opt("outcome", subagentOutcome),
	},
	TypeSubagentError: {
		req("subagentRunId", isString),
		req("message", isString),
		opt("code", isString),
	},

	TypeThinkingStart:              {opt("title", isString)},
	TypeThinkingEnd:                {},
	TypeThinkingTextMessageStart:   {},
	TypeThinkingTextMessageContent: {req("delta", isString)},
	TypeThinkingTextMessageEnd:     {},
}
