package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A caller's id funduq keeps is kept as the caller sent it, or refused.
// The door decoded threadId, runId and parentRunId before keeping them,
// and Go reads a lone surrogate escape as U+FFFD: "runId":"r\ud800x" was
// stored as runs.caller_request_id "anon:r\ufffdx", so "r\ud800" and
// "r\udbff", two ids, were one retry key, and a parentRunId reached the
// provider as an id the caller never sent. Such an id cannot be stored as
// sent: 400 bad_request naming it and the reason, as an id holding a NUL
// already is (TestBadTextIsBadRequest), nothing written, nothing offered;
// on a new thread, from a known caller, and on a thread that exists.
func TestOutsideCallerIDsFunduqCannotStoreAsSent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
	existing := fmt.Sprintf("%q", doneThread(t, h, p, url))
	body := func(thread, runID, extra string) string {
		return fmt.Sprintf(`{"threadId":%s,"runId":%s,"messages":[{"id":"u1","role":"user","content":"hi"}],"forwardedProps":{}%s}`,
			thread, runID, extra)
	}
	caller := signer(t, 0xc1)
	for _, c := range []struct {
		name, body, field string
		known             bool
	}{
		{"a runId", body(`"t-new"`, `"r\ud800x"`, ""), "runId", false},
		{"a runId, low half", body(`"t-new"`, `"r\udbff"`, ""), "runId", false},
		{"a runId on a thread", body(existing, `"r\udc00"`, ""), "runId", false},
		{"a known caller's runId", body(`"t-new"`, `"r\ud800"`, ""), "runId", true},
		{"a threadId", body(`"t\ud800"`, `"r1"`, ""), "threadId", false},
		{"a known caller's threadId", body(`"t\udfff"`, `"r1"`, ""), "threadId", true},
		{"a parentRunId", body(`"t-new"`, `"r1"`, `,"parentRunId":"p\ud800"`), "parentRunId", false},
		{"a parentRunId on a thread", body(existing, `"r1"`, `,"parentRunId":"p\udc00"`), "parentRunId", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs, threads := runCount(t, h), threadCount(t, h)
			var hdr map[string]string
			if c.known {
				hdr = presenterHdr(caller, c.body)
			}
			resp, cancel := do(t, "POST", url, c.body, hdr)
			defer cancel()
			defer resp.Body.Close()
			if resp.StatusCode != 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("got %d %s, want 400 %s naming %s", resp.StatusCode, resp.Header.Get("Content-Type"), door.CodeBadRequest, c.field)
			}
			var got map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if errCode(got) != door.CodeBadRequest || !strings.Contains(mustJSON(got), c.field) || !strings.Contains(mustJSON(got), "surrogate") {
				t.Fatalf("got %v, want %s naming %s and the surrogate", got, door.CodeBadRequest, c.field)
			}
			if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
				t.Fatalf("written: runs %d→%d, threads %d→%d", runs, r, threads, th)
			}
		})
	}
	p.None()

	// An escaped pair is a character like any other: the runId is kept as
	// that character, and the parentRunId offered as it.
	s := openStream(t, "POST", url, body(`"t-pair"`, `"r\ud83d\ude00"`, `,"parentRunId":"p\ud83d\ude00"`), nil)
	f := p.Offer()
	if !strings.Contains(string(f.RunInput), `"parentRunId":"p`+"\U0001F600"+`"`) {
		t.Errorf("offered %s, want parentRunId p\U0001F600", f.RunInput)
	}
	var kept string
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT caller_request_id FROM runs WHERE run_id = $1`, f.RunID).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != "anon:r\U0001F600" {
		t.Errorf("kept caller_request_id %q, want %q", kept, "anon:r\U0001F600")
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}
