package strictjson_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/strictjson"
)

// unstorableCases are JSON texts at and around what jsonb refuses.
var unstorableCases = []string{
	`{"a":"plain"}`,
	`{"a":"\u0000"}`,
	`{"a":"x\\u0000"}`,
	`{"a":"\\\u0000"}`,
	`{"a":"\u0001\u00e9"}`,
	`{"a":"\ud800"}`,
	`{"a":"\ud800x"}`,
	`{"a":"\udc00"}`,
	`{"a":"\ud83d\ude00"}`,
	`{"a":"\uD83D\uDE00"}`,
	`{"a":"\ud83d\u0041"}`,
	`{"a":"\ud83d\ud83d\ude00"}`,
	`{"\ud800":1}`,
	`["\\ud800"]`,
	`[1e999999]`,
	`[1e131071]`,
	`[1e131072]`,
	`[1e131073]`,
	`[12e131071]`,
	`[-1.5e300]`,
	`[1e-16383]`,
	`[1e-16384]`,
	`[0e-20000]`,
	`[0.5e-16382]`,
	`[0.5e-16383]`,
	`[1E+5]`,
	`[0]`,
	`[-0.0]`,
	`[1e0000000000001]`,
	`{"n":"1e999999"}`,
}

// Unstorable agrees with PostgreSQL's jsonb itself on every case: what it
// calls storable casts, and what it refuses does not.
func TestUnstorableAgreesWithPostgreSQL(t *testing.T) {
	pool := storetest.Pool(t)
	for _, in := range unstorableCases {
		if !json.Valid([]byte(in)) {
			t.Fatalf("case %s is not JSON", in)
		}
		var out string
		err := pool.QueryRow(context.Background(), `SELECT $1::text::jsonb::text`, in).Scan(&out)
		why := strictjson.Unstorable([]byte(in))
		if (err == nil) != (why == "") {
			t.Errorf("%.60s: PostgreSQL says %v; Unstorable says %q", in, err, why)
		}
	}
}

// Unstorable reads any JSON text without failing, and a number's digits
// never count when they stand inside a string.
func FuzzUnstorable(f *testing.F) {
	for _, in := range unstorableCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return
		}
		why := strictjson.Unstorable([]byte(in))
		quoted, _ := json.Marshal(in) // the text as one string: only its escapes count
		if in2 := strictjson.Unstorable(quoted); strings.Contains(in2, "number") {
			t.Fatalf("a string %s read as a number: %q (%q)", quoted, in2, why)
		}
	})
}
