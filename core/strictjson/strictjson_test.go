package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/strictjson"
)

func TestCheck(t *testing.T) {
	deep := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	ok64 := strings.Repeat(`{"a":`, 63) + `[]` + strings.Repeat("}", 63)
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"object", `{"a":1,"b":[1,{"a":2}],"c":{"a":{"b":null}}}`, nil},
		{"scalar", `"x"`, nil},
		{"same key in sibling objects", `[{"a":1},{"a":2}]`, nil},
		{"64 levels", ok64, nil},
		{"duplicate key", `{"publicKey":"a","publicKey":"b"}`, strictjson.ErrDuplicateKey},
		{"duplicate key after unescaping", `{"a":1,"\u0061":2}`, strictjson.ErrDuplicateKey},
		{"nested duplicate", `{"x":[{"k":1,"y":{},"k":2}]}`, strictjson.ErrDuplicateKey},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", strictjson.ErrInvalidUTF8},
		{"invalid UTF-8 in a key", "{\"\xc3\x28\":1}", strictjson.ErrInvalidUTF8},
		{"too deep", deep, strictjson.ErrTooDeep},
		{"malformed", `{"a":}`, strictjson.ErrMalformed},
		{"two values", `{}{}`, strictjson.ErrMalformed},
		{"empty", ``, strictjson.ErrMalformed},
	} {
		err := strictjson.Check([]byte(tc.in), 64)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzCheck: Check never panics, never accepts what encoding/json rejects,
// and anything it accepts decodes to the same value twice (no key is
// shadowed).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `[[[[]]]]`, "\"\xff\"", `{"a":{"b":[1,2,{"c":"d"}]}}`, `{"\u0061":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if strictjson.Check(b, 8) != nil {
			return
		}
		// Numbers are read as json.Number: the syntax is the check's, a
		// number's range is its reader's (1e999 is valid JSON).
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("accepted %q that encoding/json rejects: %v", b, err)
		}
	})
}

// A number out of float64's range is valid JSON: the check passes it and
// the field's own reader refuses it (found by FuzzCheck).
func TestHugeNumberIsSyntax(t *testing.T) {
	if err := strictjson.Check([]byte(`{"n":1E700}`), 0); err != nil {
		t.Fatal(err)
	}
}
