package store

import (
	"encoding/json"
	"strings"
	"testing"
)

// The queued notice says what the row says: a new run's thread, agent and
// input reach the broker as the door wrote them.
func TestQueuedPayloadRoundTrip(t *testing.T) {
	nr := NewRun{RunID: "run-1", ThreadID: "thr-1", ProviderKey: "key", AgentName: "echo",
		RunInput: json.RawMessage(`{"threadId":"thr-1","runId":"run-1","messages":[{"role":"user","content":"hé\n"}]}`)}
	id, r, err := ParseQueuedPayload(QueuedPayload(nr))
	if err != nil || id != "run-1" || r == nil {
		t.Fatalf("parse: id %q run %v err %v", id, r, err)
	}
	if r.ThreadID != nr.ThreadID || r.ProviderKey != nr.ProviderKey || r.AgentName != nr.AgentName || r.Status != "queued" {
		t.Fatalf("run from the notice: %+v", r)
	}
	var want, got any
	_ = json.Unmarshal(nr.RunInput, &want)
	_ = json.Unmarshal(r.RunInput, &got)
	if w, g := mustJSON(t, want), mustJSON(t, got); w != g {
		t.Fatalf("input: got %s want %s", g, w)
	}

	// An interjection's notice names the run it addresses; an older
	// door's notice, without the member, parses as an ordinary turn.
	nr.AddressedRunID = "run-0"
	if _, r, err := ParseQueuedPayload(QueuedPayload(nr)); err != nil || r == nil || r.AddressedRunID != "run-0" {
		t.Fatalf("interjection's notice: %+v %v, want addressed run-0", r, err)
	}
	old := `run-1` + "\n" + `{"t":"thr-1","p":"key","a":"echo","i":{}}`
	if _, r, err := ParseQueuedPayload(old); err != nil || r == nil || r.AddressedRunID != "" {
		t.Fatalf("older door's notice: %+v %v", r, err)
	}

	// An input too big for a NOTIFY goes as the bare id: the broker reads the row.
	nr.RunInput = json.RawMessage(`{"big":"` + strings.Repeat("x", 8000) + `"}`)
	p := QueuedPayload(nr)
	if p != "run-1" {
		t.Fatalf("big input: payload of %d bytes, want the bare id", len(p))
	}
	if id, r, err := ParseQueuedPayload(p); err != nil || id != "run-1" || r != nil {
		t.Fatalf("bare id: %q %v %v", id, r, err)
	}
	for _, bad := range []string{"", "\n{}", "run-1\n{", "run-1\n{\"t\":\"x\"}", "a b\n{}"} {
		if _, r, err := ParseQueuedPayload(bad); err == nil || r != nil {
			t.Errorf("payload %q: accepted (%v)", bad, r)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParseQueuedPayload: whatever a notice holds, the parse either names
// a run (and then a whole one, or none) or fails; it never panics.
func FuzzParseQueuedPayload(f *testing.F) {
	f.Add(QueuedPayload(NewRun{RunID: "r", ThreadID: "t", ProviderKey: "p", AgentName: "a", RunInput: json.RawMessage(`{}`)}))
	f.Add("r")
	f.Add("r\n{\"t\":1}")
	f.Fuzz(func(t *testing.T, payload string) {
		id, r, err := ParseQueuedPayload(payload)
		if r != nil && (err != nil || id == "" || r.RunID != id || r.ThreadID == "" || !json.Valid(r.RunInput)) {
			t.Fatalf("a half-read run: id %q run %+v err %v", id, r, err)
		}
		if err == nil && id == "" {
			t.Fatal("no run id and no error")
		}
	})
}
