package door_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/funduq/funduq-go/functions/door"
)

// FuzzParseLastEventID: a resume position is a non-negative integer no
// larger than the largest seq (one past it reads as that one), or it is
// refused.
func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"0", "17", " 3 ", "-1", "+5", "1e3", "999999999999999999", "9999999999999999999", "", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := door.ParseLastEventID(s)
		if !ok {
			return
		}
		if n < 0 || n > door.MaxSeq {
			t.Fatalf("%q gave %d", s, n)
		}
		if back, err := strconv.Atoi(strconv.Itoa(n)); err != nil || back != n {
			t.Fatalf("%q gave %d", s, n)
		}
	})
}

// FuzzReadCallerBag: whatever a caller puts in forwardedProps / metadata,
// reading the bag never panics, and an actor chain it finds is JSON.
func FuzzReadCallerBag(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `[]`, `"x"`, `{"actorChain":[{"key":"a"}]}`, `{"actorChain":null,"kyok":{"llmProvider":{"providerKey":"k","name":"n"}}}`,
		`{"kyok":{"llmProvider":7}}`, `{"funduq":{"caller":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		bag, err := door.ReadCallerBag(b, "forwardedProps")
		if err != nil {
			return
		}
		if bag.ActorChain != nil && !json.Valid(bag.ActorChain) {
			t.Fatalf("chain %q is not JSON", bag.ActorChain)
		}
	})
}

// FuzzCheckBody: the door's strict check never panics and only passes
// bodies encoding/json reads.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":1}`, "\"\xff\"", `[[[[[[[[[[]]]]]]]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if door.CheckBody(b, 6) == nil {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("passed %q: %v", b, err)
			}
		}
	})
}
