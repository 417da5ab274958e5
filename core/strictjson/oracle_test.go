package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"

	"github.com/funduq/funduq-go/core/strictjson"
)

// byTokens is the reading Check must agree with, written the slow and
// obvious way: encoding/json's own validity, then its token stream with a
// set of keys per open object. FuzzCheckAgrees compares the two.
func byTokens(b []byte, maxDepth int) error {
	if !utf8.Valid(b) {
		return strictjson.ErrInvalidUTF8
	}
	if !json.Valid(b) {
		return strictjson.ErrMalformed
	}
	type open struct {
		object, wantKey bool
		keys            map[string]bool
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []open
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
			return strictjson.ErrMalformed
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			k := tok.(string)
			if stack[n-1].keys[k] {
				return strictjson.ErrDuplicateKey
			}
			if stack[n-1].keys == nil {
				stack[n-1].keys = map[string]bool{}
			}
			stack[n-1].keys[k] = true
			stack[n-1].wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return strictjson.ErrTooDeep
			}
			stack = append(stack, open{object: tok == json.Delim('{'), wantKey: tok == json.Delim('{')})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// refusal names which of the package's refusals err is, or "" for none.
func refusal(err error) string {
	for _, r := range []error{strictjson.ErrMalformed, strictjson.ErrInvalidUTF8, strictjson.ErrDuplicateKey, strictjson.ErrTooDeep} {
		if errors.Is(err, r) {
			return r.Error()
		}
	}
	if err != nil {
		return "unexpected: " + err.Error()
	}
	return ""
}

// FuzzCheckAgrees: Check refuses exactly what the token walk refuses, for
// the same reason, except that a frame both malformed and too deep or
// repeating a key may be named either way by a one-pass reader.
func FuzzCheckAgrees(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `[[[[]]]]`, "\"\xff\"", `{"a":{"b":[1,2,{"c":"d"}]}}`,
		`{"\u0061":1,"a":2}`, `{"\ud800":1,"\ud801":2}`, `"\ud800"`, `{} `, ` 1 2`, `{"a":1}}`, `[1,]`, `1e999`, `-0.0E+1`,
		`{"a":[{"a":1},{"a":2}]}`, `[[[[[[[[[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := refusal(strictjson.Check(b, 8)), refusal(byTokens(b, 8))
		if got == want {
			return
		}
		// The token walk checks the whole syntax before the keys and the
		// depth; a one-pass reader stops at the first defect it meets.
		if want == strictjson.ErrMalformed.Error() && (got == strictjson.ErrTooDeep.Error() || got == strictjson.ErrDuplicateKey.Error()) {
			return
		}
		t.Fatalf("Check(%q) = %q, the token walk says %q", b, got, want)
	})
}

// BenchmarkCheck is one provider event frame, as the link's read loop
// checks it before decoding.
func BenchmarkCheck(b *testing.B) {
	frame := []byte(`{"type":"event","runId":"run_000000000000000000000001","seq":7,"event":{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"sixty-four bytes of payload, as the load tool sends by default.."}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := strictjson.Check(frame, 0); err != nil {
			b.Fatal(err)
		}
	}
}
