package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// The caller's bag is kept with the thread it opens, in a form that takes
// JSON values only as PostgreSQL's jsonb holds them: a lone surrogate
// escape (\ud800, which a strict reader calls malformed and Go reads as
// U+FFFD) or a number past numeric's range cannot be stored. That is the
// caller's input: 400 bad_request, nothing written; not 500 "internal
// error".
func TestOutsideBagValuesPostgreSQLCannotHold(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for name, bag := range map[string]string{
		"a lone surrogate":      `{"note":"a\ud800b"}`,
		"a number past numeric": `{"n":1e999999}`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"threadId":"t","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"}],"forwardedProps":` + bag + `}`
			code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
			if code != 400 || errCode(got) != door.CodeBadRequest {
				t.Fatalf("got %d %v, want 400 %s", code, got, door.CodeBadRequest)
			}
			if n := runCount(t, h); n != 0 {
				t.Fatalf("%d runs written", n)
			}
		})
	}
}

// A key is kept as the caller wrote it like a value is: a lone surrogate
// escape in a key of the bag (Go reads it as U+FFFD, so the key stored
// and relayed would not be the caller's) is refused as one in a value is
// — 400 bad_request naming it, nothing written — on a new thread and on
// one that exists alike, at any depth.
func TestOutsideBagKeysPostgreSQLCannotHold(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	url := aguiURL(srv, p.Key, "echo")
	// A thread that exists, its run done.
	existing := doneThread(t, h, p, url)
	for _, thread := range []string{"t-new", existing} {
		for name, bag := range map[string]string{
			"a key":             `{"\ud800":1}`,
			"a low half as key": `{"a\udc00b":"x"}`,
			"a nested key":      `{"a":{"\ud800":1}}`,
		} {
			t.Run(thread+"/"+name, func(t *testing.T) {
				runs, threads := runCount(t, h), threadCount(t, h)
				body := input(thread, "r-"+name, "")
				body = strings.Replace(body, `"forwardedProps":{}`, `"forwardedProps":`+bag, 1)
				resp, cancel := do(t, "POST", url, body, nil)
				defer cancel()
				defer resp.Body.Close()
				ct := resp.Header.Get("Content-Type")
				if resp.StatusCode != 400 || !strings.HasPrefix(ct, "application/json") {
					t.Fatalf("got %d %s, want 400 %s", resp.StatusCode, ct, door.CodeBadRequest)
				}
				var got map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
					t.Fatal(err)
				}
				msg, _ := got["error"].(map[string]any)["message"].(string)
				if errCode(got) != door.CodeBadRequest || !strings.Contains(msg, "surrogate") {
					t.Fatalf("got %v, want %s naming the surrogate", got, door.CodeBadRequest)
				}
				if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
					t.Fatalf("written: runs %d→%d, threads %d→%d", runs, r, threads, th)
				}
			})
		}
	}
	p.None()
}
