package agui_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// A refusal names what the caller sent wrong. On main two did not:
// GET /runs/{runId}/events?after=-1 was refused naming Last-Event-ID,
// a header the caller never sent, and an Idempotency-Key holding a byte
// that is not UTF-8 (a Latin-1 "é") reached PostgreSQL and came back as
// "an id or text in the request holds a NUL character or bytes that are
// not UTF-8", naming neither the header nor what was wrong with it.
func TestOutsideRefusalsNameWhatWasSent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	msg := func(body map[string]any) string {
		e, _ := body["error"].(map[string]any)
		s, _ := e["message"].(string)
		return s
	}
	code, _, body := jsonCall(t, "GET", srv.URL+"/runs/run_000000000000000000000000/events?after=-1", "", nil)
	if code != 400 || errCode(body) != door.CodeBadRequest || !strings.HasPrefix(msg(body), "after ") {
		t.Errorf("?after=-1: %d %v; want 400 %s naming after", code, body, door.CodeBadRequest)
	}
	code, _, body = jsonCall(t, "GET", srv.URL+"/runs/run_000000000000000000000000/events", "",
		map[string]string{agui.LastEventIDHeader: "-1"})
	if code != 400 || errCode(body) != door.CodeBadRequest || !strings.HasPrefix(msg(body), agui.LastEventIDHeader+" ") {
		t.Errorf("Last-Event-ID: -1: %d %v; want 400 %s naming Last-Event-ID", code, body, door.CodeBadRequest)
	}
	runs, threads := runCount(t, h), threadCount(t, h)
	code, _, body = jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), input("new", "r-1", ""),
		map[string]string{agui.IdempotencyHeader: "k\xe9"})
	if code != 400 || errCode(body) != door.CodeBadRequest || !strings.Contains(msg(body), agui.IdempotencyHeader) {
		t.Errorf("an Idempotency-Key that is not UTF-8: %d %v; want 400 %s naming %s", code, body, door.CodeBadRequest, agui.IdempotencyHeader)
	}
	if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
		t.Errorf("the refusal wrote runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}
