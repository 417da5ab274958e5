package identity

import (
	"encoding/json"
	"testing"
)

// Expected strings were produced by CPython's json.dumps (ensure_ascii=True).
func TestAppendPyJSONString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"translator", `"translator"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"\x00\x1f\x7f", `"\u0000\u001f\u007f"`},
		{"<>&'/", `"<>&'/"`},
		{"é", `"\u00e9"`},
		{"\u2028", `"\u2028"`},
		{"😀", `"\ud83d\ude00"`},
		{"\xff", `"\ufffd"`},
	} {
		got := string(appendPyJSONString(nil, tc.in))
		if got != tc.want {
			t.Errorf("appendPyJSONString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Errorf("%s does not parse: %v", got, err)
		}
	}
}
