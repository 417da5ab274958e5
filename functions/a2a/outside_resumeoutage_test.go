package a2a_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A tasks/resubscribe whose stream must read the record to go on — its
// tail's first read, the run's live feed gone — while the door's
// PostgreSQL is unreachable from that read on, cut (connections closed,
// new ones refused) or hung, ends with JSON-RPC -32043 naming the task and
// the Last-Event-ID to resubscribe with once storage is back (design.md
// §Doors under storage faults; D13 "fail fast"). It used to keep the
// stream open with keep-alives until its budget (the Lambda deadline less
// its margin); the budget here is far longer, so an end on it (-32048) or
// no end is the defect; and the test's hang detector (slowGuard) longer
// than the budget, so that the defect says so, and a starved machine,
// slow to reach the give-up, is not taken for it. While the feed carries the run the stream rides it
// instead — the reply comes in whole — and ends -32043 naming the task
// only when the final status cannot be read. A tasks/get while the
// storage is away is answered -32043 with 503.
func TestOutsideResubscribeMeetingAnOutageEndsTyped(t *testing.T) {
	for _, tc := range []struct {
		name           string
		expire, freeze bool
	}{
		{"cut, the stream rides the feed", false, false},
		{"cut, the feed gone", true, false},
		{"hung, the feed gone", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv, w, px := watchedDoorWith(t, h, riding)
			c := newClient(t, srv, p.Key, "echo", "")
			c.within = slowGuard
			task := c.send(c.message("m1", "hi", nil), map[string]any{"configuration": map[string]any{"blocking": false}})
			id, _ := task["id"].(string)
			f := p.Offer()
			p.Accept(f.RunID)
			p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"one"}`)
			h.Eventually("the events are stored", func() bool { return h.Run(f.RunID).LastSeq == 3 })
			if tc.expire {
				o, err := redis.ParseURL(h.Cfg.RedisURL)
				if err != nil {
					t.Fatal(err)
				}
				rdb := redis.NewClient(o)
				defer rdb.Close()
				if err := rdb.Del(context.Background(), h.Prefix+"run:"+f.RunID+":events").Err(); err != nil {
					t.Fatal(err)
				}
			}

			var once sync.Once
			cut := make(chan struct{})
			w.OnStart(func(sql string) {
				// The tail's first read: the events after its position.
				if strings.Contains(strings.Join(strings.Fields(sql), " "), "seq > $2 ORDER BY seq LIMIT") {
					once.Do(func() {
						if tc.freeze {
							px.Freeze()
						} else {
							px.Close()
						}
						close(cut)
					})
				}
			})
			st := c.stream(c.body("tasks/resubscribe", map[string]any{"id": id}),
				map[string]string{a2a.LastEventIDHeader: "1"})
			riding := !tc.expire
			if riding {
				// The reply's end, stored and published while the door's
				// storage is away.
				<-cut
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":" two"}`)
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"r"}`)
				p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
				p.Finish(f.RunID)
			}
			items := st.rest()
			<-cut
			if len(items) < 2 {
				t.Fatalf("resubscribe: %+v", items)
			}
			last, text := "1", ""
			for _, it := range items[1 : len(items)-1] {
				if it.Resp.Error != nil {
					t.Fatalf("an error before the stream's end: %+v", it.Resp.Error)
				}
				if it.ID != "" {
					last = it.ID
				}
				if a, _ := it.Resp.Result["artifact"].(map[string]any); a != nil {
					parts, _ := a["parts"].([]any)
					for _, pt := range parts {
						if m, _ := pt.(map[string]any); m != nil {
							s, _ := m["text"].(string)
							text += s
						}
					}
				}
			}
			if riding {
				// The RUN_FINISHED (seq 6) is relayed as the final status,
				// which cannot be read: the resume point is after it.
				if text != "one two" {
					t.Fatalf("riding the feed, the reply came as %q", text)
				}
				last = "6"
			}
			e := items[len(items)-1].Resp.Error
			if e == nil || e.Code != a2a.CodeUnavailable || e.Data["reason"] != "storage_unavailable" ||
				e.Data["taskId"] != id || e.Data["lastEventId"] != last || e.Data["resume"] != "tasks/resubscribe" {
				t.Fatalf("the stream ended with %+v (result %v); want error %d naming task %s and Last-Event-ID %s",
					e, items[len(items)-1].Resp.Result, a2a.CodeUnavailable, id, last)
			}
			r := c.call("tasks/get", map[string]any{"id": id})
			if r.Status != http.StatusServiceUnavailable || r.Error == nil || r.Error.Code != a2a.CodeUnavailable {
				t.Fatalf("tasks/get while storage is away: %d %+v", r.Status, r.Error)
			}
		})
	}
}

// riding gives a stream time to ride out an outage on the live feed: a
// budget far longer than the give-up, and shorter than the client's
// slowGuard.
func riding(o *a2a.Options) {
	o.StreamBudget = slowGuard / 2
	o.Tail.SettleWait = 300 * time.Millisecond
}

// A message/stream whose task is written, and whose door's PostgreSQL is
// cut right after (at the stream's first read of the record), shows the
// task as written — its id, the caller's message — and follows it on the
// live feed, the agent's reply included, rather than answer -32043
// "storage unavailable, retry" about a task that exists and runs: the
// caller, anonymous, would retry and make a second task (a messageId
// opening a context is not matched, D17), and the first would reach
// nobody. With the record still away at the end, the stream's last item
// is -32043 naming the task (the final status cannot be read), as any
// stream's whose end cannot be read.
func TestOutsideStreamOfATaskJustWrittenRidesOutAnOutage(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, px := watchedDoorWith(t, h, riding)
	c := newClient(t, srv, p.Key, "echo", "")
	var once sync.Once
	w.OnStart(func(sql string) {
		if strings.HasPrefix(strings.TrimSpace(sql), "SELECT") && strings.Contains(sql, "FROM thread_messages") {
			once.Do(px.Close)
		}
	})
	st := c.stream(c.body("message/stream", map[string]any{"message": c.message("m1", "hi", nil)}), nil)
	first, ok := st.next()
	if !ok || first.Resp.Error != nil || first.Resp.Result["kind"] != "task" {
		t.Fatalf("the stream's first item: %+v (error %+v)", first.Resp.Result, first.Resp.Error)
	}
	id, _ := first.Resp.Result["id"].(string)
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s, the stream shows %s", f.RunID, id)
	}
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"one"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"r"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	rest := st.rest()
	var text string
	for _, it := range rest {
		if a, _ := it.Resp.Result["artifact"].(map[string]any); a != nil {
			parts, _ := a["parts"].([]any)
			for _, pt := range parts {
				if m, _ := pt.(map[string]any); m != nil {
					s, _ := m["text"].(string)
					text += s
				}
			}
		}
	}
	last := rest[len(rest)-1]
	if text != "one" || last.Resp.Error == nil || last.Resp.Error.Code != a2a.CodeUnavailable || last.Resp.Error.Data["taskId"] != id {
		t.Fatalf("after the task: reply %q, last item %+v (error %+v)", text, last.Resp.Result, last.Resp.Error)
	}
	if n := count(t, h, "runs"); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// A non-blocking message/send whose task is written, and whose door's
// PostgreSQL is cut right after (at its read of the task to answer it), is
// answered with the task as written — its id, submitted, the caller's
// message — not -32043 "retry" about a task that exists and runs: an
// anonymous caller's retry would make a second task (D17). The task runs,
// and tasks/get reads it once storage is back.
func TestOutsideSendOfATaskJustWrittenAnswersItThroughAnOutage(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, px := watchedDoor(t, h)
	c := newClient(t, srv, p.Key, "echo", "")
	var once sync.Once
	w.OnStart(func(sql string) {
		if strings.HasPrefix(strings.TrimSpace(sql), "SELECT") && strings.Contains(sql, "FROM thread_messages") {
			once.Do(px.Close)
		}
	})
	r := c.call("message/send", map[string]any{"message": c.message("m1", "hi", nil), "configuration": map[string]any{"blocking": false}})
	if r.Error != nil || r.Result["kind"] != "task" {
		t.Fatalf("the send with its storage cut after the write: %d %+v (result %v)", r.Status, r.Error, r.Result)
	}
	id, _ := r.Result["id"].(string)
	hist, _ := r.Result["history"].([]any)
	if stateOf(r.Result) != "submitted" || len(hist) != 1 {
		t.Fatalf("the task as written: %q, history %v", stateOf(r.Result), hist)
	}
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s, answered %s", f.RunID, id)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	h.WaitStatus(id, run.Completed)
	if n := count(t, h, "runs"); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}
