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
// top-level members its type's schema does not require, and keeps a null
// that is the value of a required member which may hold any JSON value —
// STATE_SNAPSHOT's snapshot, CUSTOM's value, RAW's event. AG-UI accepts
// null there and refuses the event without the member, so dropping it
// would turn an event funduq took into one the caller's client rejects.
// An event of an unknown type loses every null member, as with DropNulls.
func DropOptionalNulls(raw json.RawMessage) (json.RawMessage, error) {
	obj, _ := decodeObject(raw)
	typ, _ := stringField(obj, "type")
	keep := map[string]bool{}
	for _, f := range schemas[typ] {
		if f.required {
			keep[f.name] = true
		}
	}
	return rewriteMembers(raw, func(key string, value json.RawMessage) (json.RawMessage, bool) {
		if kindOf(value) == kindNull && !keep[key] {
			return nil, true
		}
		return value, false
	})
}

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
