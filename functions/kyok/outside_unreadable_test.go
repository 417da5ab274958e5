package kyok_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// A chunk frame funduq cannot read as one — its data repeats a key, holds
// invalid UTF-8, nests too deep, or the frame's own members do not decode —
// is an invalid chunk: it fails the completion (provider-link.md §8.1, "an
// invalid chunk fails the completion"). It must never be dropped while the
// answer goes on to end in done, which hands the calling agent a truncated
// answer that looks like success.
func TestOutsideUnreadableChunkFailsTheCompletion(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x52, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	bad := map[string]func(id string) string{
		"repeated key in data": func(id string) string {
			return rawChunk(id, `{"id":"a","id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lost"}}]}`)
		},
		"invalid UTF-8 in data": func(id string) string {
			return strings.Replace(rawChunk(id, chunkData("lost ?")), "?", "\xff", 1)
		},
		"nested too deep": func(id string) string {
			return rawChunk(id, `{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lost"}}],"x":`+
				strings.Repeat("[", 80)+strings.Repeat("]", 80)+`}`)
		},
		"a member that does not decode": func(id string) string {
			return fmt.Sprintf(`{"type":"chunk","requestId":%q,"message":7,"data":%s}`, id, chunkData("lost"))
		},
	}
	for name, frame := range bad {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", name, stream), func(t *testing.T) {
				l.t = t
				defer func() { l.t = e.t }()
				body := plainBody
				if stream {
					body = streamBody
				}
				res := e.asyncCall(a, token, body)
				id := l.requestID()
				l.raw(rawChunk(id, chunkData("kept ")))
				l.raw(frame(id))
				if m := l.next("error"); m["requestId"] != id {
					t.Errorf("the refusal does not name the completion: %v", m)
				}
				l.raw(rawChunk(id, chunkData("after")))
				l.raw(`{"type":"done","requestId":"` + id + `"}`)
				r := wait(t, res)
				// Drain what the link answered to the frames after the bad
				// one, up to a barrier of our own.
				l.raw(`{"type":"deleteModel","name":"barrier"}`)
				for m := l.next("error"); m["name"] != "barrier"; m = l.next("error") {
				}
				if !stream {
					if got, _ := errorCode(t, r.body); r.code != 502 || got != "llm_failed" {
						t.Fatalf("%d %s, want 502 llm_failed", r.code, r.body)
					}
					return
				}
				ev := sseEvents(r.body)
				if r.code != 200 || ev[len(ev)-1] == "data: [DONE]" || !strings.Contains(ev[len(ev)-1], "funduq_relay_failed") {
					t.Fatalf("%d %q, want a final error and no [DONE]", r.code, ev)
				}
			})
		}
	}
}
