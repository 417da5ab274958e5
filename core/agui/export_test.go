package agui

import "encoding/json"

// SchemaTypes lists the event types Validate knows, for the tests that check
// every one of them is covered.
func SchemaTypes() []string {
	out := make([]string, 0, len(schemas))
	for t := range schemas {
		out = append(out, t)
	}
	return out
}

// StringField exposes stringField on a one-key object.
func StringField(raw []byte) (string, bool) {
	return stringField(map[string]json.RawMessage{"k": raw}, "k")
}

// DecodeObject exposes decodeObject.
func DecodeObject(raw []byte) (map[string]json.RawMessage, bool) { return decodeObject(raw) }
