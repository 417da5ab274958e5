package agui

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DropNulls returns the JSON object raw without its top-level keys whose
// value is null; the other members keep their order and their key and value
// bytes exactly (only the whitespace between members is not kept). An
// object with no null member is returned as given. raw must be a JSON
// object; any other input is an error wrapping ErrMalformed.
func DropNulls(raw json.RawMessage) (json.RawMessage, error) {
	if !json.Valid(raw) || kindOf(raw) != kindObject {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var out bytes.Buffer
	out.WriteByte('{')
	dropped, kept := false, 0
	for dec.More() {
		start := dec.InputOffset()
		if _, err := dec.Token(); err != nil { // the key
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key := bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n,")
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if kindOf(value) == kindNull {
			dropped = true
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
	if !dropped {
		return raw, nil
	}
	out.WriteByte('}')
	return json.RawMessage(out.Bytes()), nil
}
