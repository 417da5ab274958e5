package agui

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/funduq/funduq-go/core/jsonscan"
)

// The JSON kinds a raw value can have, named by its first byte.
const (
	kindNone   = 0 // empty input
	kindString = '"'
	kindObject = '{'
	kindArray  = '['
	kindBool   = 'b'
	kindNull   = 'n'
	kindNumber = '0'
)

// kindOf classifies a syntactically valid JSON value by its first byte.
func kindOf(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindNone
	}
	switch c := raw[0]; c {
	case '"', '{', '[':
		return c
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	default:
		return kindNumber
	}
}

// decodeObject decodes raw as a JSON object. It fails for invalid JSON and
// for any other kind of value (including null).
func decodeObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if kindOf(raw) != kindObject {
		return nil, false
	}
	// As encoding/json decodes into a map[string]json.RawMessage (a
	// repeated key: the last one; invalid UTF-8 in a key replaced), read
	// in one pass: each value is raw's own bytes, not a copy.
	dec := jsonscan.Open(raw, jsonscan.Loose...)
	defer dec.Close()
	if _, err := dec.ReadToken(); err != nil { // '{'
		return nil, false
	}
	obj := make(map[string]json.RawMessage, 8)
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		name := tok.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		end := int(dec.InputOffset())
		obj[name] = json.RawMessage(raw[end-len(v) : end : end])
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return nil, false
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return obj, true
}

// decodeArray decodes raw as a JSON array.
func decodeArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if kindOf(raw) != kindArray {
		return nil, false
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil {
		return nil, false
	}
	return arr, true
}

// stringField returns obj[key] when it is a JSON string.
func stringField(obj map[string]json.RawMessage, key string) (string, bool) {
	raw, ok := obj[key]
	if !ok || kindOf(raw) != kindString {
		return "", false
	}
	// Most strings have no escapes: their bytes are the value (raw is
	// valid JSON, so it holds no control characters). Invalid UTF-8 goes
	// through the decoder, which replaces it.
	if t := bytes.TrimSpace(raw); len(t) >= 2 && t[len(t)-1] == '"' {
		if body := t[1 : len(t)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
			return string(body), true
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
