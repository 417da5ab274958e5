package kyok

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Member is one member of a JSON object, its value's bytes as they were.
type Member struct {
	Key   string
	Value json.RawMessage
}

var errNotObject = errors.New("kyok: not a JSON object")

// Members splits a JSON object into its members in order. Duplicate keys
// are kept as they come.
func Members(raw json.RawMessage) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	var out []Member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, Member{Key: key, Value: v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return out, nil
}

// BuildObject renders members as a compact JSON object, values verbatim.
func BuildObject(ms []Member) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.Key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// DropNulls removes every object member whose value is null, at any depth
// (array elements are kept), keeping key order. It is how a chunk is
// relayed on the SSE stream (design.md §KYOK).
// Input that is not valid JSON is returned unchanged.
func DropNulls(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return raw
	}
	switch raw[0] {
	case '{':
		ms, err := Members(raw)
		if err != nil {
			return raw
		}
		kept := ms[:0]
		for _, m := range ms {
			if string(bytes.TrimSpace(m.Value)) == "null" {
				continue
			}
			m.Value = DropNulls(m.Value)
			kept = append(kept, m)
		}
		return BuildObject(kept)
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return raw
		}
		var b bytes.Buffer
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(DropNulls(it))
		}
		b.WriteByte(']')
		return b.Bytes()
	}
	return raw
}
