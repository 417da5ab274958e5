package a2a_test

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// An Idempotency-Key belongs to its caller (design.md D17), as a messageId
// does: another caller sending the same key — with its own message, or
// with the very message the first caller sent — opening a context or on a
// context both share, gets its own new task, never a 422 about a key it
// did not use and never the first caller's task; the first caller's own
// retry still finds its task.
func TestOutsideIdempotencyKeyBelongsToItsCaller(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, seatDoor(t, h), p.Key, "echo", v)
			A := signer(t, 0xa1).PublicKeyHex()
			send := func(seat, mid, text, key string, extra map[string]any) rpcResp {
				t.Helper()
				hdr := map[string]string{a2a.IdempotencyHeader: key}
				if seat != "" {
					hdr[seatHeader] = seat
				}
				cfg := map[string]any{"blocking": false}
				if v == "1.0" {
					cfg = map[string]any{"returnImmediately": true}
				}
				return c.rawCall(c.body(methodOf(v, "message/send"), map[string]any{"message": c.message(mid, text, extra), "configuration": cfg}), hdr)
			}
			complete := func(what, text string, task map[string]any) {
				t.Helper()
				f := recv(t, playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} }), what)
				if f.RunID != task["id"] || userText(t, f) != text {
					t.Errorf("%s: offered %s with %q, want task %v with %q", what, f.RunID, userText(t, f), task["id"], text)
				}
				h.WaitStatus(f.RunID, run.Completed)
			}
			for _, on := range []string{"a new context", "a shared context"} {
				var extra map[string]any
				key := "key-" + on
				if on == "a shared context" {
					opened := taskResult(t, v, send(A, "open", "open", "opening", nil))
					complete("the shared context's first run", "open", opened)
					extra = map[string]any{"contextId": opened["contextId"]}
				}
				mine := taskResult(t, v, send(A, "m-"+on, "hello", key, extra))
				complete("A's run", "hello", mine)
				if again := taskResult(t, v, send(A, "m-"+on, "hello", key, extra)); again["id"] != mine["id"] {
					t.Errorf("%s: A's retry answered task %v, want %v", on, again["id"], mine["id"])
				}
				for i, o := range []struct{ name, mid, text string }{
					{"another caller, its own message", "other-" + on, "from B"},
					{"another caller, A's very message", "m-" + on, "hello"},
				} {
					seat := signer(t, byte(0xb1+i)).PublicKeyHex()
					r := send(seat, o.mid, o.text, key, extra)
					if r.Error != nil {
						t.Errorf("%s, %s: refused %d %d %s (the key is A's)", on, o.name, r.Status, r.Error.Code, r.Error.Message)
						continue
					}
					task := taskResult(t, v, r)
					if task["id"] == mine["id"] {
						t.Errorf("%s, %s: answered with A's task %v", on, o.name, mine["id"])
						continue
					}
					complete(o.name, o.text, task)
				}
			}
		})
	}
}

// A stream dropped mid-run and resubscribed on another door instance with
// Last-Event-ID (design.md D9) gets every event after the last one it
// read, once and in order, then the final status; the task the second
// door reads agrees with what the two streams showed together.
func TestOutsideStreamDroppedResumesOnAnotherDoor(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c1 := newClient(t, startDoor(t, h, nil), p.Key, "echo", v)
			c2 := newClient(t, startDoor(t, h, nil), p.Key, "echo", v)
			st := c1.stream(c1.body(methodOf(v, "message/stream"), map[string]any{"message": c1.message("m", "hi", nil)}), nil)
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

			rs := c2.stream(c2.body(methodOf(v, "tasks/resubscribe"), map[string]any{"id": f.RunID}), map[string]string{a2a.LastEventIDHeader: last})
			p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
			p.Finish(f.RunID)
			rest := normItems(t, v, rs.rest())
			if len(rest) < 2 || rest[0].kind != "task" || rest[len(rest)-1].kind != "status-update" || stateOf(rest[len(rest)-1].obj) != wireState(v, "completed") {
				t.Fatalf("the resumed stream: %v", rest)
			}
			lastSeq, _ := strconv.Atoi(last)
			var deltas []string
			for _, it := range rest[1:] {
				n, err := strconv.Atoi(it.id)
				if it.id != "" && (err != nil || n <= lastSeq) {
					t.Errorf("item id %q after Last-Event-ID %s", it.id, last)
				}
				if it.id != "" {
					lastSeq = n
				}
				if it.kind == "artifact-update" {
					art, _ := it.obj["artifact"].(map[string]any)
					deltas = append(deltas, mustJSON(art["parts"]))
				}
			}
			if len(deltas) != 1 {
				t.Errorf("the resumed stream's deltas %v, want the one after the drop", deltas)
			}
			got := c2.ok(methodOf(v, "tasks/get"), map[string]any{"id": f.RunID})
			if want := map[string]string{"r": "one two"}; !reflect.DeepEqual(artifactsOf(got), want) || stateOf(got) != wireState(v, "completed") {
				t.Errorf("tasks/get on the second door: %v %q, want %v completed", artifactsOf(got), stateOf(got), want)
			}
		})
	}
}
