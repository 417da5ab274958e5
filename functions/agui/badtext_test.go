package agui_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// An id or text PostgreSQL's text cannot store (a NUL character, bytes
// that are not UTF-8) is the caller's bad input: 400 naming it, not 500
// "internal error" (outside test F3).
func TestBadTextIsBadRequest(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for _, c := range []struct{ name, method, url, body string }{
		{"thread id not UTF-8", "GET", srv.URL + "/threads/%ff%fe", ""},
		{"run id with NUL", "GET", srv.URL + "/runs/x%00y/events", ""},
		{"threadId with NUL", "POST", aguiURL(srv, p.Key, "echo"),
			`{"threadId":"a\u0000b","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, got := jsonCall(t, c.method, c.url, c.body, nil)
			if code != 400 || errCode(got) != door.CodeBadRequest || !strings.Contains(fmt.Sprint(got), "NUL") {
				t.Fatalf("got %d %v, want 400 %s naming the NUL", code, got, door.CodeBadRequest)
			}
		})
	}
}
