// Package strictjson checks outside JSON before anything reads it.
//
// Go's encoding/json accepts what a careful reader must not: an object with
// the same key twice (the last one silently wins, so two parsers of the same
// bytes can disagree about who a payload names), invalid UTF-8 (silently
// replaced by U+FFFD, so the bytes signed and the string read differ), and
// nesting as deep as the input likes. funduq refuses all three on every body
// and frame that crosses a trust boundary: the doors' requests, POST
// /tickets, and the provider and KYOK links' frames. A JSON escape of a lone
// surrogate (\ud800) is well-formed JSON and is decoded to U+FFFD as
// encoding/json does; it is not refused.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting a check allows when given 0.
const DefaultMaxDepth = 64

// The refusals; Check's error wraps exactly one.
var (
	ErrMalformed    = errors.New("not valid JSON")
	ErrInvalidUTF8  = errors.New("not valid UTF-8")
	ErrDuplicateKey = errors.New("an object repeats a key")
	ErrTooDeep      = errors.New("nested too deeply")
)

type frame struct {
	object  bool
	wantKey bool
	keys    map[string]struct{}
}

// Check reports whether b is one well-formed JSON value in valid UTF-8
// whose objects never repeat a key (compared after unescaping) and whose
// nesting is at most maxDepth (0: DefaultMaxDepth).
func Check(b []byte, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if !utf8.Valid(b) {
		return ErrInvalidUTF8
	}
	if !json.Valid(b) {
		return ErrMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return ErrMalformed
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			k, ok := tok.(string)
			if !ok {
				return ErrMalformed
			}
			top := &stack[n-1]
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("%w: %q", ErrDuplicateKey, truncate(k))
			}
			if top.keys == nil {
				top.keys = map[string]struct{}{}
			}
			top.keys[k] = struct{}{}
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return fmt.Errorf("%w: more than %d levels", ErrTooDeep, maxDepth)
			}
			stack = append(stack, frame{object: tok == json.Delim('{'), wantKey: tok == json.Delim('{')})
		case json.Delim('}'), json.Delim(']'):
			if len(stack) == 0 {
				return ErrMalformed
			}
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	for i := 40; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return ""
}

// HasNULEscape reports whether JSON raw holds the escape \u0000: valid
// JSON that PostgreSQL cannot store, since jsonb refuses it and its text
// decoded holds a NUL, which text columns refuse. A backslash occurs only
// inside strings and always starts an escape, so skipping each escaped
// character finds every escape exactly once.
func HasNULEscape(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+5 < len(raw) && raw[i+1] == 'u' && string(raw[i+2:i+6]) == "0000" {
			return true
		}
		i++ // the escaped character: a second backslash is not a new escape
	}
	return false
}
