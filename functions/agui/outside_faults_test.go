package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/seeds"
)

// Faults at a seeded moment of one turn (design.md D9, D13), seen from the
// caller's side: the door's PostgreSQL backends terminated while the POST
// waits inside its insert, or at any event of the stream (a door that
// polls PostgreSQL alone is then in a read or about to be); the feed-fed
// door's Redis connections killed (its tail blocked on the feed); the caller
// dropping its connection after any event and resuming — at once or
// events later, on the door it used, on a second door over the same
// database, or by retrying its POST with the same Idempotency-Key and
// Last-Event-ID. The caller sees its whole run or a typed 503 it retries
// with the same key; across its connections every stored event arrives
// once and in order, each connection opening with a RUN_STARTED and the
// last ending at RUN_FINISHED; another reader following the run from its
// start sees it end too; the key made one run. FUNDUQ_DOORFAULT_SEEDS
// picks the seeds (default 1-6).
func TestOutsideDoorFaultsAtASeededMoment(t *testing.T) {
	seeds.Run(t, "FUNDUQ_DOORFAULT_SEEDS", "1-6", aguiDoorFaults)
}

func aguiDoorFaults(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xd00f))
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	// A feed-fed door, its Redis clients named so the test can kill them,
	// and one that polls PostgreSQL alone, over one database.
	feedClient := "doorfaults-" + strings.Trim(h.Prefix, ":")
	doors := []*httptest.Server{startDoorWith(t, mustDeps(t, h, h.RedisURLNamed(feedClient)), nil),
		startDoor(t, h, func(o *agui.Options) { o.Feed = nil })}
	home := doors[rng.IntN(2)]
	url := aguiURL(home, p.Key, "echo")
	thread := doneThread(t, h, p, url)
	runs := runCount(t, h)

	body := input(thread, "r1", "")
	key := map[string]string{agui.IdempotencyHeader: fmt.Sprintf("faults-%d", seed)}
	var cur *stream
	if rng.IntN(2) == 0 {
		// The door's backends go while its insert waits on the thread's row.
		release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, thread)
		answer := postAsync(t, url, body, key)
		h.Eventually("the POST waits on the thread's lock", h.LockWaits)
		killed := h.KillBackends(nodetest.DoorApp)
		release()
		first := <-answer
		t.Logf("insert: %d door backends killed; the POST answered %d", killed, first.resp.StatusCode)
		if first.resp.StatusCode == http.StatusOK {
			cur = first
		} else {
			typedUnavailable(t, first.resp)
			cur = openRetrying(t, "POST", url, body, key)
		}
	} else {
		cur = openRetrying(t, "POST", url, body, key)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	observer := openRetrying(t, "GET", doors[rng.IntN(2)].URL+"/runs/"+f.RunID+"/events", "", nil)

	evs := []string{runStartedFor(f), `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`}
	for i := range 1 + rng.IntN(5) {
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"d%d "}`, i))
	}
	evs = append(evs, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	n := len(evs)

	c := &faultCaller{t: t, cur: cur, msgEnd: n - 1}
	dropAt := rng.IntN(n + 1) // after the caller read this many events; n: never
	resumeAt := -1
	resumeHow := rng.IntN(3)
	resume := func(sent int) {
		hdr := map[string]string{}
		if c.last > 0 {
			hdr[agui.LastEventIDHeader] = strconv.Itoa(c.last)
		}
		switch resumeHow {
		case 0, 1:
			c.connect(openRetrying(t, "GET", doors[resumeHow].URL+"/runs/"+f.RunID+"/events", "", hdr))
		default:
			hdr[agui.IdempotencyHeader] = key[agui.IdempotencyHeader]
			c.connect(openRetrying(t, "POST", url, body, hdr))
		}
		t.Logf("resumed after %d (%d sent) by way %d", c.last, sent, resumeHow)
		c.readTo(sent)
	}
	for i := 0; i <= n; i++ {
		if rng.IntN(3) == 0 {
			t.Logf("%d door backends killed after event %d", h.KillBackends(nodetest.DoorApp), i)
		}
		if rng.IntN(4) == 0 {
			t.Logf("%d door Redis clients killed after event %d", h.KillRedisClients(feedClient), i)
		}
		if i == dropAt {
			c.cur.close()
			c.cur = nil
			resumeAt = i + rng.IntN(n-i+1)
		}
		if i == resumeAt {
			resume(i)
		}
		if i == n {
			break
		}
		p.Event(f.RunID, evs[i])
		if c.cur != nil {
			c.readTo(i + 1)
		}
	}
	p.Finish(f.RunID)
	if rest := events(c.cur.rest()); len(rest) != 0 {
		t.Fatalf("after RUN_FINISHED the caller's stream went on: %+v", rest)
	}
	if got := c.ids; !slices.Equal(got, seqRange(1, n)) {
		t.Fatalf("across its connections the caller saw ids %v, want 1..%d once each", got, n)
	}
	if got, started := storedIDs(t, observer.rest()); !slices.Equal(got, seqRange(1, n)) || !started {
		t.Fatalf("the other reader saw ids %v (opened by RUN_STARTED: %v), want 1..%d", got, started, n)
	}
	h.WaitStatus(f.RunID, run.Completed)

	// The same key, once more, is the same run, whole; nothing else ran.
	again := events(openRetrying(t, "POST", url, body, key).rest())
	if len(again) != n || again[0].event(t)["runId"] != f.RunID {
		t.Fatalf("the key retried after the end streamed %+v", again)
	}
	if got := runCount(t, h); got != runs+1 {
		t.Fatalf("%d runs made for one Idempotency-Key", got-runs)
	}
	p.None()
}

// faultCaller is one caller's view across its connections: the stored
// event ids it read, in order.
type faultCaller struct {
	t        *testing.T
	cur      *stream
	ids      []string
	last     int
	fresh    bool // the current connection has relayed no event yet
	opening  bool // the current connection has relayed no stored event yet
	reopened bool // the current connection reopened m1
	msgEnd   int  // the seq of m1's TEXT_MESSAGE_END (its START is seq 2)
}

func (c *faultCaller) connect(s *stream) {
	c.cur, c.fresh, c.opening, c.reopened = s, true, true, false
}

// readTo reads the current connection up to the stored event with seq n:
// each event the next seq, the connection's first one a RUN_STARTED (the
// door's own, without an id, when the stored one is behind it). A
// connection resumed inside m1 has m1's TEXT_MESSAGE_START again, without
// an id, right after that RUN_STARTED (design.md §The doors, "A resume
// from inside a message").
func (c *faultCaller) readTo(n int) {
	c.t.Helper()
	for c.last < n {
		fr, ok := c.cur.nextEvent()
		if !ok {
			c.t.Fatalf("the stream ended after id %d without an end (ids so far %v)", c.last, c.ids)
		}
		typ := fr.event(c.t)["type"]
		if c.fresh && typ != "RUN_STARTED" {
			c.t.Fatalf("a connection opened with %s, not RUN_STARTED", typ)
		}
		c.fresh = false
		inside := c.last >= 2 && c.last < c.msgEnd
		if fr.ID == "" {
			switch {
			case typ == "RUN_STARTED":
			case typ == "TEXT_MESSAGE_START" && c.opening && inside && !c.reopened:
				c.reopened = true
			default:
				c.t.Fatalf("an event without an id: %s", fr.Data)
			}
			continue
		}
		if c.opening && inside && !c.reopened {
			c.t.Fatalf("resumed after %d, inside m1, without its TEXT_MESSAGE_START: id %s", c.last, fr.ID)
		}
		c.opening = false
		c.ids = append(c.ids, fr.ID)
		if fr.ID != strconv.Itoa(c.last+1) {
			c.t.Fatalf("event id %s after %d (ids %v)", fr.ID, c.last, c.ids)
		}
		c.last++
	}
}

// postAsync POSTs body in the background; the answer comes on the channel
// as a stream whatever its status.
func postAsync(t *testing.T, url, body string, hdr map[string]string) <-chan *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	out := make(chan *stream, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// A 599 of the test's own: the caller saw no answer at all.
			resp = &http.Response{StatusCode: 599, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(err.Error()))}
		}
		out <- &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	}()
	t.Cleanup(func() {
		cancel()
	})
	return out
}

// openRetrying opens a stream as a caller that honours a typed 503 does:
// it asks again. A door whose pooled PostgreSQL connections were
// terminated while idle answers 503 storage_unavailable to the requests
// that find one of them (design.md §Doors under storage faults).
func openRetrying(t *testing.T, method, url, body string, hdr map[string]string) *stream {
	t.Helper()
	for range 10 {
		resp, cancel := do(t, method, url, body, hdr)
		if resp.StatusCode == http.StatusOK {
			s := &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
			t.Cleanup(s.close)
			return s
		}
		typedUnavailable(t, resp)
		cancel()
		t.Logf("%s %s: a typed 503; asking again", method, url)
	}
	t.Fatalf("%s %s: ten typed 503s in a row", method, url)
	return nil
}

// typedUnavailable checks a refusal a caller can act on: 503, Retry-After,
// the error envelope with code unavailable.
func typedUnavailable(t *testing.T, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		json.Unmarshal(b, &e) != nil || e.Error.Code != door.CodeUnavailable {
		t.Fatalf("a request whose backend was killed answered %d (Retry-After %q): %s, want a typed 503",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
