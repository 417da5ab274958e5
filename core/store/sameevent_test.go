package store_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/store"
)

// A resend is the same JSON value however it is written (design.md D7);
// a value that differs anywhere is another event.
func TestSameEvent(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":"x"}`, `{"a":1,"b":"x"}`, true},
		{`{"a":1,"b":"x"}`, "{ \"b\" : \"x\",\n\t\"a\" : 1 }", true},
		{`{"s":"A"}`, `{"s":"\u0041"}`, true},
		{`{"s":"é/"}`, `{"s":"\u00e9\/"}`, true},
		{`{"s":"😀"}`, `{"s":"\ud83d\ude00"}`, true},
		{`{"\u0061":1}`, `{"a":1}`, true},
		{`{"n":1}`, `{"n":1.0}`, true},
		{`{"n":1}`, `{"n":10e-1}`, true},
		{`{"n":100}`, `{"n":1E+2}`, true},
		{`{"n":0.5}`, `{"n":5e-1}`, true},
		{`{"n":0}`, `{"n":-0.0e7}`, true},
		{`{"n":-12.50}`, `{"n":-1.25e1}`, true},
		{`{"n":1e400}`, `{"n":10e399}`, true},
		{`{"n":9007199254740993}`, `{"n":9007199254740993.000}`, true},
		{`[1,[2,{"a":null,"b":true}]]`, `[ 1, [ 2.0, {"b":true,"a":null} ] ]`, true},

		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`{"a":1}`, `{"a":1,"b":null}`, false},
		{`{"a":null}`, `{}`, false},
		{`{"a":true}`, `{"a":1}`, false},
		{`{"a":"A"}`, `{"a":"a"}`, false},
		{`{"A":1}`, `{"a":1}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`[1]`, `[1,1]`, false},
		{`{"n":-1}`, `{"n":1}`, false},
		{`{"n":10}`, `{"n":1}`, false},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`, false},                // the same float64
		{`{"n":0.10000000000000000001}`, `{"n":0.1}`, false},                       // the same float64
		{`{"n":1e1000000000000000000000}`, `{"n":1e1000000000000000000000}`, true}, // bytes equal
		{`{"n":1e1000000000000000000000}`, `{"n":1.0e1000000000000000000000}`, false},
		{`{"a":1,"a":1}`, `{"a":1}`, false}, // not one value: bytes alone
		{`{"a":1}`, `{"a":1} {}`, false},
		{`{"a":1}`, `{"a":1`, false},
	} {
		if got := store.SameEvent([]byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("SameEvent(%s, %s) = %v", c.a, c.b, got)
		}
		if got := store.SameEvent([]byte(c.b), []byte(c.a)); got != c.same {
			t.Errorf("SameEvent(%s, %s) = %v", c.b, c.a, got)
		}
	}
}

// A number's digits are read without arithmetic on them: a long literal
// costs its length (a provider may send one at a collision).
func TestSameEventLongNumbers(t *testing.T) {
	digits := strings.Repeat("7", 1<<20)
	a := `{"n":` + digits + `}`
	b := `{"n":` + digits + `.0}`
	if !store.SameEvent([]byte(a), []byte(b)) {
		t.Error("a long integer and its .0 differ")
	}
	if store.SameEvent([]byte(a), []byte(`{"n":`+digits+`8}`)) {
		t.Error("long integers of different lengths are the same")
	}
}
