package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A caller's message reaches the agent as the caller wrote it, or not at
// all. Go reads a lone surrogate escape in a key as U+FFFD, so a message
// with one, {"\ud800":1}, was offered to the provider as {"\ufffd":1}: a
// key the caller never sent. What funduq cannot carry in a message is
// refused as it is in the caller's bag, in a key or a value, at any depth
// — a lone surrogate escape, an escaped NUL, a number past PostgreSQL's
// numeric — 400 bad_request naming the message and the reason, nothing
// written, nothing offered; on a new thread and on one that exists alike.
// (An agent echoing such a message in its events would have its run failed
// malformed_event: funduq stores no event holding them.)
func TestOutsideMessageKeysAndValuesFunduqCannotCarry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
	// A thread that exists, its run done.
	existing := doneThread(t, h, p, url)
	const ok = `{"id":"u0","role":"user","content":"hi"}`
	for _, thread := range []string{"t-new", existing} {
		for _, c := range []struct{ name, messages, why string }{
			{"a key", `[{"id":"u1","role":"user","content":"hi","\ud800":1}]`, "surrogate"},
			{"a low half as key", `[{"id":"u1","role":"user","content":"hi","a\udc00b":"x"}]`, "surrogate"},
			{"a nested key", `[{"id":"u1","role":"user","content":"hi","x":{"\ud800":1}}]`, "surrogate"},
			{"a value", `[{"id":"u1","role":"user","content":"a\ud800b"}]`, "surrogate"},
			{"the second message", `[` + ok + `,{"id":"u1","role":"user","content":"hi","\udbff":1}]`, "surrogate"},
			{"a NUL", `[{"id":"u1","role":"user","content":"a\u0000b"}]`, "NUL"},
			{"a number past numeric", `[{"id":"u1","role":"user","content":"hi","n":1e999999}]`, "numeric"},
		} {
			t.Run(thread+"/"+c.name, func(t *testing.T) {
				runs, threads := runCount(t, h), threadCount(t, h)
				body := input(thread, "r-"+c.name, "")
				body = strings.Replace(body, `"messages":[{"id":"u1","role":"user","content":"hi"}]`, `"messages":`+c.messages, 1)
				resp, cancel := do(t, "POST", url, body, nil)
				defer cancel()
				defer resp.Body.Close()
				if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 400 || !strings.HasPrefix(ct, "application/json") {
					t.Fatalf("got %d %s, want 400 %s", resp.StatusCode, ct, door.CodeBadRequest)
				}
				var got map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
					t.Fatal(err)
				}
				msg, _ := got["error"].(map[string]any)["message"].(string)
				at := "messages[0]"
				if strings.HasPrefix(c.messages, "["+ok) {
					at = "messages[1]"
				}
				if errCode(got) != door.CodeBadRequest || !strings.Contains(msg, at) || !strings.Contains(msg, c.why) {
					t.Fatalf("got %v, want %s naming %s and the %s", got, door.CodeBadRequest, at, c.why)
				}
				if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
					t.Fatalf("written: runs %d→%d, threads %d→%d", runs, r, threads, th)
				}
			})
		}
	}
	p.None()

	// An escaped pair is a character like any other: taken, and offered
	// as the same key and text.
	body := strings.Replace(input("t-pair", "r-pair", ""), `"content":"hi"`, `"content":"smile \ud83d\ude00","\ud83d\ude00":1`, 1)
	s := openStream(t, "POST", url, body, nil)
	f := p.Offer()
	var in struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 {
		t.Fatalf("run input %s: %v", f.RunInput, err)
	}
	if m := in.Messages[0]; m["content"] != "smile \U0001F600" || m["\U0001F600"] != float64(1) {
		t.Errorf("offered %v, want the caller's key and text", m)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}
