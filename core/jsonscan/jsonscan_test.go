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

// A decoder given back after a loose read reads strictly again when
// opened without options: options do not carry over from a previous
// loan.
func TestOptionsDoNotCarryOver(t *testing.T) {
	for range 3 {
		r := jsonscan.Open([]byte(`{"a":1,"a":2}`), jsonscan.Loose...)
		if _, err := r.ReadValue(); err != nil {
			t.Fatalf("loose read: %v", err)
		}
		r.Close()
		r = jsonscan.Open([]byte(`{"a":1,"a":2}`))
		_, err := r.ReadValue()
		r.Close()
		if !errors.Is(err, jsontext.ErrDuplicateName) {
			t.Fatalf("default read after a loose one: %v, want a duplicate name error", err)
		}
	}
}
