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
	"errors"
	"fmt"
	"io"
	"strings"
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

// Unstorable says why PostgreSQL's jsonb could not hold the JSON text raw
// ("" when it can): an escaped NUL (\u0000), an escaped surrogate without
// its pair, or a number beyond numeric's range (131072 digits before the
// point, 16383 after). jsonb refuses all three, so a write carrying them
// could never land; text columns refuse the NUL too. raw must be valid
// JSON: a backslash occurs only inside strings and always starts an
// escape, and a number only outside them.
func Unstorable(raw []byte) string {
	inStr := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inStr {
			switch {
			case c == '"':
				inStr = true
			case c == '-' || c >= '0' && c <= '9':
				n := numberEnd(raw, i)
				if !numericHolds(raw[i:n]) {
					return "holds a number beyond PostgreSQL's numeric range"
				}
				i = n - 1
			}
			continue
		}
		switch c {
		case '"':
			inStr = false
		case '\\':
			u, ok := escapedUnit(raw, i)
			switch {
			case !ok:
				i++ // the escaped character: a second backslash is not a new escape
			case u == 0:
				return "holds a NUL character (\\u0000)"
			case u >= 0xdc00 && u <= 0xdfff:
				return "holds an escaped surrogate without its pair"
			case u >= 0xd800 && u <= 0xdbff:
				if lo, ok := escapedUnit(raw, i+6); !ok || lo < 0xdc00 || lo > 0xdfff {
					return "holds an escaped surrogate without its pair"
				}
				i += 11 // the pair
			default:
				i += 5
			}
		}
	}
	return ""
}

// escapedUnit reads the \uXXXX escape at raw[i], if there is one.
func escapedUnit(raw []byte, i int) (uint16, bool) {
	if i+5 >= len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
		return 0, false
	}
	var u uint16
	for _, h := range raw[i+2 : i+6] {
		switch {
		case h >= '0' && h <= '9':
			h -= '0'
		case h >= 'a' && h <= 'f':
			h -= 'a' - 10
		case h >= 'A' && h <= 'F':
			h -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint16(h)
	}
	return u, true
}

// numberEnd is the end of the JSON number starting at raw[i].
func numberEnd(raw []byte, i int) int {
	for i < len(raw) && strings.IndexByte("+-.0123456789eE", raw[i]) >= 0 {
		i++
	}
	return i
}

// numericHolds reports whether PostgreSQL's numeric holds the JSON number
// n: at most 131072 digits before the point and 16383 after, once the
// exponent has moved it (leading zeros of the integer part do not count,
// and JSON allows none but a lone 0).
func numericHolds(n []byte) bool {
	n = bytes.TrimPrefix(n, []byte("-"))
	mant, exp, _ := bytes.Cut(bytes.ToLower(n), []byte("e"))
	intPart, frac, _ := bytes.Cut(mant, []byte("."))
	if len(intPart) == 1 && intPart[0] == '0' {
		intPart = nil
	}
	e := 0
	if len(exp) > 0 {
		neg := exp[0] == '-'
		exp = bytes.TrimLeft(exp, "+-")
		exp = bytes.TrimLeft(exp, "0")
		if len(exp) > 7 {
			return false // beyond either bound whatever the digits
		}
		for _, d := range exp {
			e = e*10 + int(d-'0')
		}
		if neg {
			e = -e
		}
	}
	before, after := len(intPart)+e, len(frac)-e
	return before <= 131072 && after <= 16383
}
