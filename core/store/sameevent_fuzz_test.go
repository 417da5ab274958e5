package store

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"
	"unicode/utf8"
)

// SameEvent decides whether a provider's event is dropped as a resend, so
// it must never call two different values the same. The fuzz target reads
// both texts a second, independent way (encoding/json with UseNumber, the
// numbers as exact rationals) and fails on any pair SameEvent reads
// differently, and on a value it does not find equal to itself.
func FuzzSameEvent(f *testing.F) {
	for _, p := range [][2]string{
		{`{"a":1,"b":[true,null,"x"]}`, `{ "b" : [true, null, "\u0078"], "a" : 1.0 }`},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`},
		{`{"n":10e-1}`, `{"n":1}`},
		{`{"n":0}`, `{"n":-0.0e7}`},
		{`"1"`, `1`},
		{`{"a":1,"a":1}`, `{"a":1}`},
		{`[1,2]`, `[2,1]`},
		{`{"x":1e400}`, `{"x":10e399}`},
		{`{}`, `[]`},
	} {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		got := SameEvent(a, b)
		if got != SameEvent(b, a) {
			t.Fatalf("SameEvent(%q, %q) = %v but not the other way round", a, b, got)
		}
		va, okA := referenceValue(a)
		if okA && !SameEvent(a, a) {
			t.Fatalf("SameEvent(%q, itself) = false", a)
		}
		vb, okB := referenceValue(b)
		if !okA || !okB {
			// A text that is not one JSON value (invalid, a repeated
			// name, bad UTF-8) is the same only byte for byte; numbers
			// too large for the reference are left to SameEvent.
			if got && !bytes.Equal(a, b) && (!oneValue(a) || !oneValue(b)) {
				t.Fatalf("SameEvent(%q, %q) = true, but one is not a JSON value", a, b)
			}
			return
		}
		if want := referenceSame(va, vb); got != want {
			t.Fatalf("SameEvent(%q, %q) = %v, the reference reads %v", a, b, got, want)
		}
	})
}

// referenceValue reads b with encoding/json, numbers kept as json.Number;
// false for anything that is not exactly one valid JSON value with unique
// member names and valid UTF-8, or whose numbers big.Rat cannot hold in
// reasonable size (exponents beyond ±1000 are left to the bytes).
func referenceValue(b []byte) (any, bool) {
	if !oneValue(b) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, numbersSmall(v)
}

// oneValue: b is one valid JSON value, valid UTF-8, no repeated name.
func oneValue(b []byte) bool {
	return json.Valid(b) && utf8.Valid(b) && uniqueNames(b)
}

// uniqueNames walks b's tokens and reports whether no object repeats a
// member name (encoding/json keeps the last; SameEvent refuses the text).
func uniqueNames(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	type frame struct {
		obj   bool
		names map[string]bool
		key   bool // the next string token is a member name
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return true
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{obj: tok == '{', names: map[string]bool{}, key: tok == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
		default:
			if top != nil && top.obj {
				if top.key {
					s, _ := tok.(string)
					if top.names[s] {
						return false
					}
					top.names[s] = true
					top.key = false
				} else {
					top.key = true
				}
			}
		}
	}
}

func numbersSmall(v any) bool {
	switch v := v.(type) {
	case json.Number:
		_, ok := ratOf(v)
		return ok
	case []any:
		for _, e := range v {
			if !numbersSmall(e) {
				return false
			}
		}
	case map[string]any:
		for _, e := range v {
			if !numbersSmall(e) {
				return false
			}
		}
	}
	return true
}

func ratOf(n json.Number) (*big.Rat, bool) {
	s := n.String()
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			exp := s[i+1:]
			if len(exp) > 0 && (exp[0] == '+' || exp[0] == '-') {
				exp = exp[1:]
			}
			for len(exp) > 1 && exp[0] == '0' {
				exp = exp[1:]
			}
			if len(exp) > 3 {
				return nil, false
			}
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

func referenceSame(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !referenceSame(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !referenceSame(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, _ := ratOf(a)
		rb, _ := ratOf(b)
		return ra.Cmp(rb) == 0
	default: // nil, bool, string
		return a == b
	}
}
