package livefeed

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// An outcome that parses is one MarshalOutcome gives back as it was: a
// door answering from it answers from the broker's values.
func FuzzParseOutcome(f *testing.F) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456000, time.UTC)
	for _, o := range []Outcome{
		{Status: "completed", LastSeq: 5, LastActivityAt: at,
			Messages: []OutcomeMessage{{ID: "msg_1", Message: json.RawMessage(`{"role":"assistant","content":"hi <&>"}`)}}},
		{Status: "failed", LastSeq: 2, FailureReason: "provider_stream_ended_without_finishing", LastActivityAt: at},
		{Status: "input-required", LastSeq: 4, LastActivityAt: at, Interrupt: json.RawMessage(`{"interrupts": [{"id": "ask-1"}]}`)},
	} {
		raw, ok := MarshalOutcome(o)
		if !ok {
			f.Fatalf("seed %+v over the cap", o)
		}
		f.Add(raw)
	}
	for _, s := range []string{`{}`, `null`, `[]`, `{"status":"completed","lastSeq":-1,"lastActivityAt":"2026-12-02T03:04:05Z"}`,
		`{"status":"completed","lastSeq":1,"lastActivityAt":"2026-12-02T03:04:05Z","interrupt":null,"future":{"x":1}}`,
		`{"status":"completed","lastSeq":1,"lastActivityAt":"2026-12-02T03:04:05Z","messages":[{"id":"","message":{}}]}`,
		`{"status":"completed","lastSeq":1,"lastActivityAt":"not a time"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, err := ParseOutcome(raw)
		if err != nil {
			return
		}
		if o.Status == "" || o.LastSeq < 0 || o.LastActivityAt.IsZero() || string(o.Interrupt) == "null" {
			t.Fatalf("parsed an outcome it should refuse: %+v", o)
		}
		again, ok := MarshalOutcome(o)
		if !ok {
			// Re-encoding may escape what the input did not; an outcome
			// over the cap is simply not carried.
			return
		}
		back, err := ParseOutcome(again)
		if err != nil {
			t.Fatalf("%s re-encoded as %s does not parse: %v", raw, again, err)
		}
		if !sameOutcome(o, back) {
			t.Fatalf("round trip changed the outcome:\n %+v\n %+v", o, back)
		}
	})
}

// sameOutcome compares outcomes as values: the instant, not the zone, and
// the raw JSON compacted.
func sameOutcome(a, b Outcome) bool {
	if !a.LastActivityAt.Equal(b.LastActivityAt) {
		return false
	}
	a.LastActivityAt, b.LastActivityAt = time.Time{}, time.Time{}
	a.Interrupt, b.Interrupt = compact(a.Interrupt), compact(b.Interrupt)
	for _, o := range []*Outcome{&a, &b} {
		ms := make([]OutcomeMessage, len(o.Messages))
		for i, m := range o.Messages {
			ms[i] = OutcomeMessage{ID: m.ID, Message: compact(m.Message)}
		}
		o.Messages = ms
	}
	return reflect.DeepEqual(a, b)
}

func compact(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(raw)
	return json.RawMessage(strings.TrimSpace(b.String()))
}

// A stream entry reads as the end marker whenever it has an "end" status,
// whatever else it holds (a newer broker's fields are ignored); its
// outcome is carried as published, none when absent or left out.
func FuzzMarkerEntry(f *testing.F) {
	f.Add("5-2", "completed", `{"status":"completed"}`, false, "")
	f.Add("7-2", "failed", "", true, "")
	f.Add("0-2", "cancelled", "", false, "future")
	f.Add("x", "", "", false, "")
	f.Add("3-1", "", "", false, "seq")
	f.Fuzz(func(t *testing.T, id, end, outcome string, omitted bool, extra string) {
		vals := map[string]any{}
		if end != "" {
			vals["end"] = end
		} else {
			vals["seq"], vals["event"] = id, outcome
		}
		if outcome != "" && end != "" {
			vals["outcome"] = outcome
		}
		if omitted {
			vals["outcome_omitted"] = "1"
		}
		if extra != "" && extra != "end" && extra != "outcome" && extra != "outcome_omitted" {
			vals[extra] = "x"
		}
		e := entryOf(id, vals)
		if end == "" {
			if e.End != "" || e.Outcome != nil {
				t.Fatalf("an event read as a marker: %+v", e)
			}
			return
		}
		if e.End != end || (end != "" && outcome != "") != (e.Outcome != nil) || e.OutcomeOmitted != omitted {
			t.Fatalf("marker %v read as %+v", vals, e)
		}
		if e.Outcome != nil && string(e.Outcome) != outcome {
			t.Fatalf("outcome %q read as %q", outcome, e.Outcome)
		}
	})
}

// An outcome over the cap is not encoded for a marker.
func TestOutcomeCap(t *testing.T) {
	o := Outcome{Status: "input-required", LastSeq: 1, LastActivityAt: time.Now(),
		Interrupt: json.RawMessage(`{"interrupts":[{"id":"` + strings.Repeat("x", MaxOutcome) + `"}]}`)}
	if _, ok := MarshalOutcome(o); ok {
		t.Fatal("an outcome over MaxOutcome was encoded")
	}
	o.Interrupt = json.RawMessage(`{"interrupts":[{"id":"a","message":"<&>"}]}`)
	raw, ok := MarshalOutcome(o)
	if !ok || !strings.Contains(string(raw), `"message":"<&>"`) {
		t.Fatalf("encoded %s (%v): want the payload as given, HTML unescaped", raw, ok)
	}
}
