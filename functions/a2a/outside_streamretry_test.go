package a2a_test

import (
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A message/stream retried with Last-Event-ID — what an SSE client sends
// when it retries the request whose stream dropped, the same messageId
// from the same caller, so the door finds the task it made — gets the
// task as of that event and every later event once (D9), as a
// tasks/resubscribe with the same Last-Event-ID does; not the task from
// its start again. A send that makes a new task streams it whole whatever
// Last-Event-ID says, and one that is not an id is -32602 with nothing
// written, as on tasks/resubscribe.
func TestOutsideRetriedStreamResumesAfterLastEventID(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, seatDoor(t, h), p.Key, "echo", v)
			seat := map[string]string{seatHeader: signer(t, 0xa1).PublicKeyHex()}
			with := func(k, val string) map[string]string {
				hdr := map[string]string{k: val}
				for k, v := range seat {
					hdr[k] = v
				}
				return hdr
			}
			body := c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m", "hi", nil)})
			st := c.stream(body, seat)
			f := p.Offer()
			p.Accept(f.RunID)
			p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"one "}`)
			// Read up to the first delta, then drop the stream.
			var first []item
			for len(first) == 0 || first[len(first)-1].kind != "artifact-update" {
				it, ok := st.next()
				if !ok {
					t.Fatal("the first stream ended early")
				}
				first = append(first, normItems(t, v, []sseItem{it})...)
			}
			last := first[len(first)-1].id
			st.resp.Body.Close()
			st.cancel()
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"two"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"r"}`)

			// The retry: the same request, from where the stream dropped.
			rs := c.stream(body, with(a2a.LastEventIDHeader, last))
			p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
			p.Finish(f.RunID)
			rest := normItems(t, v, rs.rest())
			if len(rest) < 2 || rest[0].kind != "task" || rest[0].obj["id"] != f.RunID ||
				rest[len(rest)-1].kind != "status-update" || stateOf(rest[len(rest)-1].obj) != wireState(v, "completed") {
				t.Fatalf("the retried stream: %v", rest)
			}
			if got, want := artifactsOf(rest[0].obj), map[string]string{"r": "one "}; !reflect.DeepEqual(got, want) {
				t.Errorf("the retried stream opens with artifacts %v, want %v (the task as of event %s)", got, want, last)
			}
			lastSeq, _ := strconv.Atoi(last)
			var deltas []string
			for _, it := range rest[1:] {
				if it.id != "" {
					if n, err := strconv.Atoi(it.id); err != nil || n <= lastSeq {
						t.Errorf("item id %q on a retry with Last-Event-ID %s", it.id, last)
					}
				}
				if it.kind == "artifact-update" {
					deltas = append(deltas, artifactsOf(map[string]any{"artifacts": []any{it.obj["artifact"]}})["r"])
				}
			}
			if want := []string{"two"}; !reflect.DeepEqual(deltas, want) {
				t.Errorf("the retried stream's deltas %q, want %q: the ones after the drop, once", deltas, want)
			}

			// A send that makes a new task streams it from its start.
			got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			fresh := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m2", "hi", nil)}),
				with(a2a.LastEventIDHeader, "3"))
			f2 := recv(t, got, "the new task offered")
			items := normItems(t, v, fresh.rest())
			if len(items) < 2 || items[0].obj["id"] != f2.RunID || items[1].id != "1" {
				t.Errorf("a new task's stream with Last-Event-ID 3: %v, want task %s from its event 1", items, f2.RunID)
			}

			// Last-Event-ID that is not an id: -32602, nothing written.
			runs := count(t, h, "runs")
			resp, cancel := c.post(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m3", "hi", nil)}),
				with(a2a.LastEventIDHeader, "three"))
			var b []byte
			isSSE := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
			if !isSSE {
				b, _ = io.ReadAll(resp.Body)
			}
			resp.Body.Close()
			cancel()
			if isSSE || !strings.Contains(string(b), `"code":-32602`) {
				t.Errorf("Last-Event-ID three: %d %s %s, want -32602", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			if n := count(t, h, "runs"); n != runs {
				t.Errorf("Last-Event-ID three: %d runs written", n-runs)
			}
		})
	}
}
