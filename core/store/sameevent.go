package store

import (
	"bytes"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/funduq/funduq-go/core/jsonscan"
)

// SameEvent reports whether a and b are the same JSON value, which is how
// a resend is told from another event under the same provider seq
// (design.md D7, "A resend is the same JSON value"): the same members with
// the same values, in any order and any whitespace; strings compared after
// unescaping; numbers by their exact decimal value (1, 1.0 and 10e-1 are
// one value, JSON numbers carrying no type, as RFC 8785 reads them too).
// Unlike RFC 8785's canonical form, no number is read as a float64: two
// integers past 2^53, or fractions past 17 digits, that differ are
// different values. Text that does not read as one JSON value (a repeated
// name, invalid UTF-8) is the same only byte for byte.
//
// Equal bytes answer at once; the values are read only when the bytes
// differ, which is a seq collision — rare — never an ordinary event.
func SameEvent(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, ok := readValue(a)
	if !ok {
		return false
	}
	vb, ok := readValue(b)
	return ok && sameValue(va, vb)
}

// The kinds of a read value: a JSON string is jsonString, so that it
// never equals a number's decimal (a string).
type (
	jsonString string
	jsonObject map[string]any
	jsonArray  []any
)

// readValue reads b as one JSON value: nil, bool, jsonString, decimal,
// jsonArray or jsonObject.
func readValue(b []byte) (any, bool) {
	r := jsonscan.Open(b)
	defer r.Close()
	v, ok := readNext(r.Decoder)
	if !ok {
		return nil, false
	}
	if _, err := r.ReadToken(); err != io.EOF {
		return nil, false // more than one value, or bytes that are none
	}
	return v, true
}

func readNext(d *jsontext.Decoder) (any, bool) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, false
	}
	switch tok.Kind() {
	case 'n':
		return nil, true
	case 't', 'f':
		return tok.Bool(), true
	case '"':
		return jsonString(tok.String()), true
	case '0':
		return decimalOf(tok.String())
	case '[':
		arr := jsonArray{}
		for d.PeekKind() != ']' {
			v, ok := readNext(d)
			if !ok {
				return nil, false
			}
			arr = append(arr, v)
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, false
		}
		return arr, true
	case '{':
		obj := jsonObject{}
		for d.PeekKind() != '}' {
			tok, err := d.ReadToken()
			if err != nil || tok.Kind() != '"' {
				return nil, false
			}
			name := tok.String() // a token is good until the next read
			v, ok := readNext(d)
			if !ok {
				return nil, false
			}
			obj[name] = v // a repeated name fails the read first
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, false
		}
		return obj, true
	}
	return nil, false
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case jsonObject:
		b, ok := b.(jsonObject)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameValue(va, vb) {
				return false
			}
		}
		return true
	case jsonArray:
		b, ok := b.(jsonArray)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	default: // nil, bool, jsonString, decimal: comparable
		return a == b
	}
}

// decimal is a JSON number's exact value: digits × 10^exp, digits with
// no leading or trailing zero ("" for zero, which has no sign).
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// maxExpDigits bounds an exponent read as an int64: ±10^18 plus any
// literal's length cannot overflow. A number with a longer exponent is
// far beyond PostgreSQL's numeric (strictjson.Unstorable refuses it), and
// is not read: the events differ unless their bytes are the same.
const maxExpDigits = 18

// decimalOf reads a JSON number literal (its grammar checked by the
// decoder) without arithmetic on its digits, so a long literal costs its
// length, never its square.
func decimalOf(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, expPart := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expPart = s[:i], s[i+1:]
	}
	var exp int64
	if expPart != "" {
		neg := false
		switch expPart[0] {
		case '-':
			neg, expPart = true, expPart[1:]
		case '+':
			expPart = expPart[1:]
		}
		expPart = strings.TrimLeft(expPart, "0")
		if len(expPart) > maxExpDigits {
			return decimal{}, false
		}
		for _, c := range []byte(expPart) {
			exp = exp*10 + int64(c-'0')
		}
		if neg {
			exp = -exp
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp -= int64(len(frac))
	digits = strings.TrimLeft(digits, "0")
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if trimmed == "" {
		return decimal{}, true // zero, -0 and 0e5 included
	}
	d.digits, d.exp = trimmed, exp
	return d, true
}
