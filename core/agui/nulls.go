package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/funduq/funduq-go/core/jsonscan"
)

// DropNulls returns the JSON object raw without its top-level keys whose
// value is null; the other members keep their order and their key and value
// bytes exactly (only the whitespace between members is not kept). An
// object with no null member is returned as given. raw must be a JSON
// object; any other input is an error wrapping ErrMalformed.
func DropNulls(raw json.RawMessage) (json.RawMessage, error) {
	return rewriteMembers(raw, func(_ string, value json.RawMessage) (json.RawMessage, bool) {
		if kindOf(value) == kindNull {
			return nil, true
		}
		return value, false
	})
}

// DropOptionalNulls is DropNulls for a relayed event: it drops the null
// members its type's schema does not require, at the top and inside the
// structures AG-UI types (messages, tool calls, content parts, outcomes,
// interrupts, usage, JSON Patch operations, a RUN_STARTED's input), and
// keeps a null that is the value of a member which may hold any JSON value
// — STATE_SNAPSHOT's snapshot, CUSTOM's value, RAW's event, a patch
// operation's value — and everything inside such a value. AG-UI 1.0
// refuses null for an optional member (absent is its only "none"), and
// accepts null there and refuses the event without the member, so
// dropping it would turn an event funduq took into one the caller's
// client rejects. A required member's null is kept: Validate refused the
// event unless its schema allows null there. An event of an unknown type
// loses every top-level null member, as with DropNulls.
func DropOptionalNulls(raw json.RawMessage) (json.RawMessage, error) {
	obj, _ := decodeObject(raw)
	typ, _ := stringField(obj, "type")
	sh := &shape{keep: map[string]bool{}, sub: eventShapes[typ]}
	for _, f := range schemas[typ] {
		if f.required {
			sh.keep[f.name] = true
		}
	}
	return sh.apply(raw)
}

// DropMessageOptionalNulls is DropOptionalNulls for one AG-UI message, as
// a MESSAGES_SNAPSHOT's messages are walked: its optional nulls dropped
// at the top, in its tool calls and in its content parts; a value that
// may hold any JSON (its metadata, say) kept whole. A message that is not
// a JSON object is returned as given.
func DropMessageOptionalNulls(raw json.RawMessage) (json.RawMessage, error) {
	if kindOf(raw) != kindObject {
		return raw, nil
	}
	return msgShape.apply(raw)
}

// A shape says where a structure's optional nulls are: in an object (or
// in each object of an array) every null member is dropped but those
// named in keep, and the members named in sub are walked with their own
// shape. A member not in sub is not looked into: it holds any JSON value,
// or one with no optional members.
type shape struct {
	keep map[string]bool
	sub  map[string]*shape
	// items: only an array is walked (a message's content is a string,
	// an array of parts, or — an activity's — an object of any values).
	items bool
}

// apply walks raw (an object, or an array of them) with sh.
func (sh *shape) apply(raw json.RawMessage) (json.RawMessage, error) {
	if arr, ok := decodeArray(raw); ok {
		var out bytes.Buffer
		changed := false
		out.WriteByte('[')
		for i, v := range arr {
			w, err := sh.item().apply(v)
			if err != nil {
				return nil, err
			}
			changed = changed || !bytes.Equal(w, v)
			if i > 0 {
				out.WriteByte(',')
			}
			out.Write(w)
		}
		out.WriteByte(']')
		if !changed {
			return raw, nil
		}
		return out.Bytes(), nil
	}
	if kindOf(raw) != kindObject || sh.items {
		return raw, nil
	}
	return rewriteMembers(raw, func(key string, value json.RawMessage) (json.RawMessage, bool) {
		if kindOf(value) == kindNull {
			if sh.keep[key] {
				return value, false
			}
			return nil, true
		}
		next, ok := sh.sub[key]
		if !ok {
			return value, false
		}
		w, err := next.apply(value)
		if err != nil || bytes.Equal(w, value) {
			return value, false
		}
		return w, true
	})
}

// item is the shape of one item of an array walked with sh.
func (sh *shape) item() *shape {
	if !sh.items {
		return sh
	}
	c := *sh
	c.items = false
	return &c
}

// The shapes of AG-UI 1.0's nested structures (core/agui validate.go has
// their checks).
var (
	flat       = &shape{}
	partShape  = &shape{sub: map[string]*shape{"source": flat}, items: true}
	toolShape  = &shape{sub: map[string]*shape{"function": flat}}
	msgShape   = &shape{sub: map[string]*shape{"toolCalls": toolShape, "content": partShape}}
	patchShape = &shape{keep: map[string]bool{"value": true}}
	inputShape = &shape{sub: map[string]*shape{
		"messages": msgShape, "tools": flat, "context": flat, "resume": flat,
	}}
	outcomeShape = &shape{sub: map[string]*shape{"interrupts": flat}}
	eventShapes  = map[string]map[string]*shape{
		TypeRunStarted:       {"input": inputShape},
		TypeRunFinished:      {"outcome": outcomeShape, "usage": flat},
		TypeRunError:         {"usage": flat},
		TypeMessagesSnapshot: {"messages": msgShape},
		TypeToolCallResult:   {"content": partShape},
		TypeStateDelta:       {"delta": patchShape},
		TypeActivityDelta:    {"patch": patchShape},
		TypeSubagentFinished: {"outcome": flat},
	}
)

// WithRunIDs returns the JSON object raw with its top-level "threadId" and
// "runId" set to threadID and runID where it names others (members kept as
// DropNulls keeps them; raw itself when it names these already). funduq's
// ids are the authority over a conversation (design.md, The doors): the
// caller continues a thread with the id its RUN_STARTED names, so a
// provider's own ids there would cost the caller its thread.
func WithRunIDs(raw json.RawMessage, threadID, runID string) (json.RawMessage, error) {
	want := map[string]string{"threadId": threadID, "runId": runID}
	return rewriteMembers(raw, func(key string, value json.RawMessage) (json.RawMessage, bool) {
		id, ok := want[key]
		if !ok {
			return value, false
		}
		var got string
		if json.Unmarshal(value, &got) == nil && got == id {
			return value, false
		}
		enc, _ := json.Marshal(id)
		return enc, true
	})
}

// rewriteMembers walks the top-level members of the JSON object raw in
// order and keeps each as edit returns it (a nil value drops the member).
// When no edit changed anything it returns raw as given; otherwise the
// members keep their key and value bytes exactly and only the whitespace
// between them is lost. It reads raw once with jsontext, which hands out
// each member's bytes verbatim; a repeated key or invalid UTF-8 is read as
// encoding/json reads it (the strict check is the intake's, not this).
func rewriteMembers(raw json.RawMessage, edit func(key string, value json.RawMessage) (json.RawMessage, bool)) (json.RawMessage, error) {
	dec := jsonscan.Open(raw, jsonscan.Loose...)
	defer dec.Close()
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	changed, kept := false, 0
	for dec.PeekKind() == '"' {
		start := dec.InputOffset()
		tok, err := dec.ReadToken() // the key
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key := bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n,")
		name := tok.String()      // before the next read, which reuses tok
		v, err := dec.ReadValue() // valid until the next read: used here
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		value, edited := edit(name, json.RawMessage(v))
		changed = changed || edited
		if value == nil {
			continue
		}
		if kept > 0 {
			out.WriteByte(',')
		}
		kept++
		out.Write(key)
		out.WriteByte(':')
		out.Write(value)
	}
	// The object's end, then nothing but space.
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more after the object", ErrMalformed)
	}
	if !changed {
		return raw, nil
	}
	out.WriteByte('}')
	return json.RawMessage(out.Bytes()), nil
}

// ReasoningRole returns the REASONING_MESSAGE_START raw with its role
// "reasoning" (raw itself when it is that already, or is another type).
// funduq takes the "assistant" role a Python SDK release declared there
// (validate.go), but AG-UI 1.0 fixes the role by the type and its client
// refuses the whole stream on any other, so the caller gets the one role
// that event can mean; nothing is lost.
func ReasoningRole(raw json.RawMessage) (json.RawMessage, error) {
	obj, _ := decodeObject(raw)
	if typ, _ := stringField(obj, "type"); typ != TypeReasoningMessageStart {
		return raw, nil
	}
	return rewriteMembers(raw, func(key string, value json.RawMessage) (json.RawMessage, bool) {
		if key != "role" {
			return value, false
		}
		if role, _ := stringField(map[string]json.RawMessage{"r": value}, "r"); role == "reasoning" {
			return value, false
		}
		return json.RawMessage(`"reasoning"`), true
	})
}
