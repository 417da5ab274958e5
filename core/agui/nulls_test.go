package agui_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

func TestDropNulls(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","timestamp":null,"rawEvent":null}`,
			`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`},
		{`{"a":null}`, `{}`},
		{`{}`, `{}`},
		// Nothing dropped: the input comes back as given.
		{` {"a" : 1 , "b":[null]} `, ` {"a" : 1 , "b":[null]} `},
		// Nested nulls stay; kept members keep their bytes and order.
		{`{ "z" : { "x" : null } , "n" : null , "a\u0041" : 1.50e3 , "s" : "<&>\u00e9" , "l" : [ null ] , "f" : false }`,
			`{"z":{ "x" : null },"a\u0041":1.50e3,"s":"<&>\u00e9","l":[ null ],"f":false}`},
		{`{"first":null,"second":"x"}`, `{"second":"x"}`},
		{`{"dup":1,"dup":null}`, `{"dup":1}`},
	}
	for _, tc := range cases {
		got, err := agui.DropNulls(json.RawMessage(tc.in))
		if err != nil {
			t.Errorf("DropNulls(%s): %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("DropNulls(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("DropNulls(%s) = %s is not valid JSON", tc.in, got)
		}
	}
	for _, bad := range []string{``, `null`, `[]`, `"x"`, `{"a":}`, `{"a":1} {}`, `{"a":1`} {
		if _, err := agui.DropNulls(json.RawMessage(bad)); !errors.Is(err, agui.ErrMalformed) {
			t.Errorf("DropNulls(%s) err = %v, want ErrMalformed", bad, err)
		}
	}
}
