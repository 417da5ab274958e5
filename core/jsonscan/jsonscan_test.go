package jsonscan_test

import (
	"errors"
	"io"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/funduq/funduq-go/core/jsonscan"
)

// A lent decoder reads the bytes it was opened on and, once given back,
// the next one reads its own bytes with its own options.
func TestOpenReadsItsOwnBytes(t *testing.T) {
	r := jsonscan.Open([]byte(`{"a":1,"a":2}`))
	var err error
	for err == nil {
		_, err = r.ReadToken()
	}
	r.Close()
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) || !errors.Is(se.Err, jsontext.ErrDuplicateName) {
		t.Fatalf("strict read of a repeated name: %v, want a duplicate name error", err)
	}
	r = jsonscan.Open([]byte(` {"a":1,"a":2} `), jsonscan.Loose...)
	defer r.Close()
	v, err := r.ReadValue()
	if err != nil || string(v) != `{"a":1,"a":2}` {
		t.Fatalf("loose read: %q, %v", v, err)
	}
	if _, err := r.ReadToken(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the value: %v, want EOF", err)
	}
}
