package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/seeds"
)

// Faults at a seeded moment of one A2A turn on an existing context
// (design.md D9, D13, §Doors under storage faults), in either protocol
// version: the door's PostgreSQL backends terminated while message/stream
// waits inside its insert, or at any event of the stream; the feed-fed
// door's Redis connections killed (its tail blocked on the feed); the caller
// dropping its stream after any event and resuming with tasks/resubscribe
// and Last-Event-ID — at once or events later, on the door it used or on
// a second door over the same database that polls PostgreSQL alone — or
// with tasks/get once the task has ended. The caller gets its stream or
// a typed -32043 it retries with the same Idempotency-Key; across its
// connections every item id comes once and in order, each resumed
// stream's task snapshot holds exactly the reply read before it, and the
// reply it assembles is the agent's, whole; a second caller following
// the task from the start sees it complete; the key made one task.
// FUNDUQ_DOORFAULT_SEEDS picks the seeds (default 1-6).
func TestOutsideDoorFaultsAtASeededMoment(t *testing.T) {
	seeds.Run(t, "FUNDUQ_DOORFAULT_SEEDS", "1-6", a2aDoorFaults)
}

func a2aDoorFaults(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xa2a))
	v := []string{"", "1.0"}[rng.IntN(2)]
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	// A feed-fed door, its Redis clients named so the test can kill them,
	// and one that polls PostgreSQL alone, over one database.
	feedClient := "doorfaults-" + strings.Trim(h.Prefix, ":")
	doors := []*httptest.Server{startDoorOn(t, h, h.RedisURLNamed(feedClient)), startDoor(t, h, func(o *a2a.Options) { o.Feed = nil })}
	cs := []*client{newClient(t, doors[0], p.Key, "echo", v), newClient(t, doors[1], p.Key, "echo", v)}
	c := cs[rng.IntN(2)]
	t.Logf("version %q", v)

	// A context with one finished turn.
	st0 := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m0", "first", nil)}), nil)
	f0 := p.Offer()
	p.Accept(f0.RunID)
	p.Complete(f0.RunID, *f0.ThreadID)
	st0.rest()
	h.WaitStatus(f0.RunID, run.Completed)
	runs := count(t, h, "runs")

	body := c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m1", "hi", map[string]any{"contextId": *f0.ThreadID})})
	key := map[string]string{a2a.IdempotencyHeader: fmt.Sprintf("faults-%d", seed)}
	var cur *stream
	if rng.IntN(2) == 0 {
		release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, *f0.ThreadID)
		answer := c.postAsync(body, key)
		h.Eventually("message/stream waits on the context's lock", h.LockWaits)
		killed := h.KillBackends(nodetest.DoorApp)
		release()
		first := <-answer
		t.Logf("insert: %d door backends killed; message/stream answered %d", killed, first.StatusCode)
		cur = c.streamOrUnavailable(first)
		if cur == nil {
			cur, _ = c.openRetrying(body, key)
		}
	} else {
		cur, _ = c.openRetrying(body, key)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	watcher := cs[rng.IntN(2)]
	observer, _ := watcher.openRetrying(watcher.body(methodOf(v, "tasks/resubscribe"), map[string]any{"id": f.RunID}), map[string]string{a2a.LastEventIDHeader: "0"})

	evs := []string{runStarted(*f.ThreadID, f.RunID), `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`}
	want := ""
	for i := range 1 + rng.IntN(5) {
		d := fmt.Sprintf("d%d ", i)
		want += d
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":%q}`, d))
	}
	evs = append(evs, `{"type":"TEXT_MESSAGE_END","messageId":"r"}`, runFinished(*f.ThreadID, f.RunID))
	n := len(evs)

	a := &a2aCaller{t: t, v: v, cur: cur, fresh: true}
	dropAt := rng.IntN(n) // after the caller read this many items with ids
	resumeAt, resumeOn := -1, cs[rng.IntN(2)]
	resume := func() {
		// Without Last-Event-ID a resubscribe starts from the task as it
		// stands; with it, from the item after it (0: from the start).
		hdr := map[string]string{a2a.LastEventIDHeader: strconv.Itoa(a.last)}
		s, ended := resumeOn.openRetrying(resumeOn.body(methodOf(v, "tasks/resubscribe"), map[string]any{"id": f.RunID}), hdr)
		t.Logf("resumed after %d on %s (ended: %v)", a.last, resumeOn.url, ended)
		if !ended {
			a.connect(s)
		}
	}
	for i := 0; i < n; i++ {
		if rng.IntN(3) == 0 {
			t.Logf("%d door backends killed after event %d", h.KillBackends(nodetest.DoorApp), i)
		}
		if rng.IntN(4) == 0 {
			t.Logf("%d door Redis clients killed after event %d", h.KillRedisClients(feedClient), i)
		}
		if i == dropAt {
			a.cur.resp.Body.Close()
			a.cur.cancel()
			a.cur = nil
			resumeAt = i + rng.IntN(n-i+1) // n: after the run's end
		}
		if i == resumeAt {
			resume()
			a.readTo(i)
		}
		p.Event(f.RunID, evs[i])
		if a.cur != nil && i < n-1 {
			a.readTo(i + 1)
		}
	}
	p.Finish(f.RunID)
	if a.cur == nil {
		resume()
	}
	final := ""
	if a.cur != nil {
		final = a.finish()
	}
	h.WaitStatus(f.RunID, run.Completed)
	got := resumeOn.ok(methodOf(v, "tasks/get"), map[string]any{"id": f.RunID})
	if final == "" {
		// The task ended before the caller was back: tasks/get tells it.
		a.text = artifactsOf(got)["r"]
		final = stateOf(got)
	}
	if final != wireState(v, "completed") || a.text != want {
		t.Fatalf("the caller ended with %q and reply %q, want completed and %q", final, a.text, want)
	}
	if stateOf(got) != wireState(v, "completed") || artifactsOf(got)["r"] != want {
		t.Fatalf("tasks/get: %q %v, want completed and %q", stateOf(got), artifactsOf(got), want)
	}
	o := &a2aCaller{t: t, v: v, cur: observer, fresh: true}
	if st := o.finish(); st != wireState(v, "completed") || o.text != want {
		t.Fatalf("the other caller ended with %q and reply %q, want completed and %q", st, o.text, want)
	}

	// The same key, once more, is the same task; nothing else ran.
	again, _ := c.openRetrying(body, key)
	items := normItems(t, v, again.rest())
	if len(items) == 0 || items[0].kind != "task" || items[0].obj["id"] != f.RunID {
		t.Fatalf("the key retried after the end: %v", items)
	}
	if got := count(t, h, "runs"); got != runs+1 {
		t.Fatalf("%d tasks made for one Idempotency-Key", got-runs)
	}
	p.None()
}

// a2aCaller is one caller's view of a task across its streams.
type a2aCaller struct {
	t     *testing.T
	v     string
	cur   *stream
	fresh bool   // the current stream's task snapshot is still to come
	last  int    // the last item id read
	text  string // the reply as the caller assembled it
	ids   []int
}

func (a *a2aCaller) connect(s *stream) { a.cur, a.fresh = s, true }

// item reads the current stream's next item; a snapshot must hold exactly
// the reply read so far.
func (a *a2aCaller) item() (item, bool) {
	a.t.Helper()
	raw, ok := a.cur.next()
	if !ok {
		return item{}, false
	}
	its := normItems(a.t, a.v, []sseItem{raw})
	it := its[0]
	if a.fresh {
		if it.kind != "task" || it.id != "" {
			a.t.Fatalf("a stream opened with %s (id %q), not the task", it.kind, it.id)
		}
		if got := artifactsOf(it.obj)["r"]; got != a.text {
			a.t.Fatalf("the resumed task's reply %q, want %q (what was read before)", got, a.text)
		}
		a.fresh = false
		return it, true
	}
	if it.id != "" {
		n, err := strconv.Atoi(it.id)
		a.ids = append(a.ids, n)
		if err != nil || n != a.last+1 {
			a.t.Fatalf("item id %s after %d (ids %v)", it.id, a.last, a.ids)
		}
		a.last = n
	}
	if it.kind == "artifact-update" {
		art, _ := it.obj["artifact"].(map[string]any)
		parts, _ := art["parts"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			s, _ := pm["text"].(string)
			a.text += s
		}
	}
	return it, true
}

// readTo reads items up to id n.
func (a *a2aCaller) readTo(n int) {
	a.t.Helper()
	for a.cur != nil && a.last < n {
		if _, ok := a.item(); !ok {
			a.t.Fatalf("the stream ended after id %d without a final status", a.last)
		}
	}
}

// finish reads the stream to its end and returns the final state.
func (a *a2aCaller) finish() string {
	a.t.Helper()
	state := ""
	for {
		it, ok := a.item()
		if !ok {
			break
		}
		if state != "" {
			a.t.Fatalf("an item after the final status: %v", it.obj)
		}
		if it.kind == "status-update" {
			if s := stateOf(it.obj); s != wireState(a.v, "working") {
				state = s
			}
		}
	}
	if state == "" {
		a.t.Fatalf("the stream ended after id %d without a final status", a.last)
	}
	return state
}

// postAsync posts body in the background.
func (c *client) postAsync(body string, hdr map[string]string) <-chan *http.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	c.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.version != "" {
		req.Header.Set(a2a.VersionHeader, c.version)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// A 599 of the test's own: the caller saw no answer at all.
			resp = &http.Response{StatusCode: 599, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(err.Error()))}
		}
		out <- resp
	}()
	return out
}

// streamOrUnavailable is resp as a stream, or nil when it is the typed
// refusal of storage trouble (-32043, 503, Retry-After); anything else
// fails the test.
func (c *client) streamOrUnavailable(resp *http.Response) *stream {
	c.t.Helper()
	s, ended := c.streamOr(resp, 0)
	if ended {
		c.t.Fatal("told the task ended")
	}
	return s
}

// streamOr is resp as a stream; nil for a typed -32043; ended (and nil)
// for endedCode when it is not 0.
func (c *client) streamOr(resp *http.Response, endedCode int) (s *stream, ended bool) {
	c.t.Helper()
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		s := &stream{t: c.t, resp: resp, br: bufio.NewReader(resp.Body), cancel: func() {}}
		c.t.Cleanup(func() { resp.Body.Close() })
		return s, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r rpcResp
	_ = json.Unmarshal(b, &r)
	switch {
	case r.Error != nil && endedCode != 0 && r.Error.Code == endedCode:
		return nil, true
	case r.Error != nil && r.Error.Code == a2a.CodeUnavailable && resp.StatusCode == http.StatusServiceUnavailable &&
		resp.Header.Get("Retry-After") != "":
		return nil, false
	}
	c.t.Fatalf("answered %d (Retry-After %q): %s, want a stream or a typed -32043", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	return nil, false
}

// openRetrying opens a stream as a caller that honours a typed -32043
// does: it asks again. ended: a resubscribe was told the task has ended.
func (c *client) openRetrying(body string, hdr map[string]string) (*stream, bool) {
	c.t.Helper()
	for range 10 {
		resp, cancel := c.post(body, hdr)
		s, ended := c.streamOr(resp, a2a.CodeUnsupportedOperation)
		if s != nil {
			s.cancel = cancel
			return s, false
		}
		cancel()
		if ended {
			return nil, true
		}
		c.t.Logf("a typed -32043; asking again")
	}
	c.t.Fatal("ten typed -32043s in a row")
	return nil, false
}
