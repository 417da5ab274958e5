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
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/funduq/funduq-go/core/jsonscan"
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

// Check reports whether b is one well-formed JSON value in valid UTF-8
// whose objects never repeat a key (compared after unescaping) and whose
// nesting is at most maxDepth (0: DefaultMaxDepth).
//
// The syntax and the repeated keys are jsontext's (the reader that
// encoding/json/v2 is built on), which reads a frame in one pass without
// building it. Its own UTF-8 check is relaxed so that an escaped lone
// surrogate passes, as the package comment says; raw bytes are checked
// by utf8.Valid first.
func Check(b []byte, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if !utf8.Valid(b) {
		return ErrInvalidUTF8
	}
	dec := jsonscan.Open(b, jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(false))
	defer dec.Close()
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return checkError(err)
		}
		if d := dec.StackDepth(); d > maxDepth {
			return fmt.Errorf("%w: more than %d levels", ErrTooDeep, maxDepth)
		} else if d > 0 {
			continue
		}
		if k := tok.Kind(); k == '{' || k == '[' {
			continue // the top level value opened: its end comes later
		}
		// The one top level value is done: nothing but space may follow.
		if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
			return ErrMalformed
		}
		return nil
	}
}

// checkError maps what the reader refused to the package's refusals.
func checkError(err error) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return fmt.Errorf("%w: %q", ErrDuplicateKey, truncate(se.JSONPointer.LastToken()))
	}
	return ErrMalformed
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
