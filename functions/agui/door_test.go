package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
)

// A full turn: the caller's invented thread id is not adopted, the run's
// input carries funduq's ids, and the stream relays every stored event in
// order with id = seq, ending after RUN_FINISHED.
func TestFullTurn(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("my-invented-thread", "caller-run-1", ""), nil)
	f := p.Offer()
	if f.ThreadID == nil || !run.IsMintedID(run.ThreadPrefix, *f.ThreadID) || !run.IsMintedID(run.RunPrefix, f.RunID) {
		t.Fatalf("offer does not carry funduq's ids: %+v", f)
	}
	var in struct {
		ThreadID string            `json:"threadId"`
		RunID    string            `json:"runId"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatal(err)
	}
	if in.ThreadID != *f.ThreadID || in.RunID != f.RunID || len(in.Messages) != 1 {
		t.Fatalf("run input: %s", f.RunInput)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)

	fs := s.rest()
	if got, want := typesOf(t, fs), []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}; !slices.Equal(got, want) {
		t.Fatalf("types %v, want %v", got, want)
	}
	if got := idsOf(fs); !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("ids %v", got)
	}
	first := events(fs)[0].event(t)
	if first["threadId"] != *f.ThreadID || first["runId"] != f.RunID {
		t.Fatalf("RUN_STARTED %v", first)
	}
	h.WaitStatus(f.RunID, run.Completed)
	// The caller's message is on the thread under a funduq message id.
	msgs, err := h.Store.ThreadMessages(context.Background(), *f.ThreadID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 1 || !strings.Contains(string(msgs[0]), `"role":"user"`) || strings.Contains(string(msgs[0]), `"u1"`) {
		t.Fatalf("thread messages %s", msgs)
	}

	// The fingerprint names the same agent.
	pub, _ := identity.ParsePublicKey(p.Key)
	s2 := openStream(t, "POST", aguiURL(srv, identity.Fingerprint(pub), "echo"), input(*f.ThreadID, "caller-run-2", ""), nil)
	f2 := p.Offer()
	if *f2.ThreadID != *f.ThreadID {
		t.Fatalf("the known thread id was not reused: %s vs %s", *f2.ThreadID, *f.ThreadID)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f2.ThreadID)
	if got := typesOf(t, s2.rest()); len(got) != 5 || got[4] != "RUN_FINISHED" {
		t.Fatalf("second turn %v", got)
	}
}

// An offline agent: the broker fails the run agent_offline with a stored
// RUN_ERROR and no RUN_STARTED; the door's stream starts with a synthesized
// RUN_STARTED (funduq's ids, no SSE id) and ends after the RUN_ERROR.
func TestOfflineAgent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	p.Close()
	h.Eventually("the agent is unserved", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		return err == nil && len(as) == 1 && !as[0].Online
	})
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("x", "r1", ""), nil)
	fs := events(s.rest())
	if len(fs) != 2 {
		t.Fatalf("want 2 events, got %+v", fs)
	}
	started, errEv := fs[0].event(t), fs[1].event(t)
	if started["type"] != "RUN_STARTED" || fs[0].ID != "" || errEv["type"] != "RUN_ERROR" || fs[1].ID != "1" ||
		errEv["code"] != "agent_offline" || errEv["message"] == "" {
		t.Fatalf("offline stream %+v", fs)
	}
	runID := started["runId"].(string)
	r := h.WaitStatus(runID, run.Failed)
	if r.ThreadID != started["threadId"] || r.FailureReason != string(run.ReasonAgentOffline) {
		t.Fatalf("run %+v", r)
	}
}

// A stream opened on a second door instance (its own pool and Redis client)
// for a run started on the first shows every event, in order, once — both
// while the run is live and replayed afterwards.
func TestStreamFromAnotherInstance(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	doorA := startDoor(t, h, nil)
	doorB := startDoor(t, h, nil)

	sa := openStream(t, "POST", aguiURL(doorA, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	h.Eventually("two events stored", func() bool { return len(h.Events(f.RunID)) == 2 })

	sb := openStream(t, "GET", doorB.URL+"/runs/"+f.RunID+"/events", "", nil)
	// B has the backlog; now the rest goes live while both watch.
	for i := range 20 {
		p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"%d "}`, i))
	}
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)

	want := make([]string, 24)
	for i := range want {
		want[i] = fmt.Sprint(i + 1)
	}
	for name, s := range map[string]*stream{"A": sa, "B": sb} {
		fs := events(s.rest())
		if got := idsOf(fs); !slices.Equal(got, want) {
			t.Fatalf("door %s ids %v, want %v", name, got, want)
		}
		for i, f := range fs[2:22] {
			if d := f.event(t)["delta"]; d != fmt.Sprintf("%d ", i) {
				t.Fatalf("door %s event %d delta %v", name, i+3, d)
			}
		}
	}
	// Replayed from the record after the end, from a third connection.
	fs := events(openStream(t, "GET", doorB.URL+"/runs/"+f.RunID+"/events", "", nil).rest())
	if got := idsOf(fs); !slices.Equal(got, want) {
		t.Fatalf("replay ids %v", got)
	}
}

// Last-Event-ID resumes after the event named, on any instance; a stream
// that starts past the RUN_STARTED gets a synthesized one first, and then,
// without an id, the TEXT_MESSAGE_START of a message still open at that
// id (design.md §The doors, "A resume from inside a message").
func TestLastEventID(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	other := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	first, _ := s.nextEvent()
	second, _ := s.nextEvent()
	if first.ID != "1" || second.ID != "2" {
		t.Fatalf("ids %q %q", first.ID, second.ID)
	}
	s.close() // the client drops mid-run

	// It reconnects to another door with the last id it saw, while the run
	// is still live.
	r := openStream(t, "GET", other.URL+"/runs/"+f.RunID+"/events", "", map[string]string{agui.LastEventIDHeader: "2"})
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"x"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	fs := r.rest()
	if got := typesOf(t, fs); !slices.Equal(got, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("types %v", got)
	}
	if got := idsOf(fs); !slices.Equal(got, []string{"", "", "3", "4", "5"}) {
		t.Fatalf("ids %v", got)
	}
	if re := events(fs)[1].event(t); re["messageId"] != "m1" || re["role"] != "assistant" {
		t.Fatalf("reopened %v", re)
	}
	syn := events(fs)[0].event(t)
	if syn["runId"] != f.RunID || syn["threadId"] != *f.ThreadID {
		t.Fatalf("synthesized %v", syn)
	}

	// After the end: from 4 gives just the RUN_FINISHED; from 5 nothing.
	fs = r2(t, other, f.RunID, "4")
	if got := idsOf(fs); !slices.Equal(got, []string{"", "5"}) {
		t.Fatalf("from 4: %v", got)
	}
	if fs = r2(t, srv, f.RunID, "5"); len(events(fs)) != 0 {
		t.Fatalf("from 5: %+v", fs)
	}
	// A bad Last-Event-ID and an unknown run are refused in the envelope.
	if code, _, body := jsonCall(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", map[string]string{agui.LastEventIDHeader: "x"}); code != 400 || errCode(body) != "bad_request" {
		t.Fatalf("bad Last-Event-ID: %d %v", code, body)
	}
	if code, _, body := jsonCall(t, "GET", srv.URL+"/runs/run_nope/events", "", nil); code != 404 || errCode(body) != "run_not_found" {
		t.Fatalf("unknown run: %d %v", code, body)
	}
}

// r2 reads a whole run stream from after last.
func r2(t *testing.T, srv *httptest.Server, runID, last string) []frame {
	t.Helper()
	return openStream(t, "GET", srv.URL+"/runs/"+runID+"/events", "", map[string]string{agui.LastEventIDHeader: last}).rest()
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	if e == nil {
		return ""
	}
	if m, _ := e["message"].(string); m == "" {
		return "(no message)"
	}
	c, _ := e["code"].(string)
	return c
}

// A second run on a thread with one in flight is accepted and queued; its
// stream stays open and silent (comment heartbeats only) until the provider
// works on it.
func TestQueuedSecondRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) { o.Heartbeat = 30 * time.Millisecond })

	s1 := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f1 := p.Offer()
	p.Accept(f1.RunID)
	p.Event(f1.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f1.ThreadID, f1.RunID))

	s2 := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f1.ThreadID, "r2", ""), nil)
	f2 := p.Offer() // D2: offered once the first is claimed; the provider holds it
	if *f2.ThreadID != *f1.ThreadID || f2.RunID == f1.RunID {
		t.Fatalf("second run %s on %s", f2.RunID, *f2.ThreadID)
	}
	// The snapshot names the newest active run.
	code, _, snap := jsonCall(t, "GET", srv.URL+"/threads/"+*f1.ThreadID, "", nil)
	active, _ := snap["active_run"].(map[string]any)
	if _, waiting := snap["waiting_run"]; code != 200 || active == nil || active["run_id"] != f2.RunID || waiting {
		t.Fatalf("snapshot %d %v", code, snap)
	}
	if msgs, _ := snap["messages"].([]any); len(msgs) != 2 {
		t.Fatalf("snapshot messages %v", snap["messages"])
	}
	heartbeats := 0
	for heartbeats < 3 {
		fr, ok := s2.next()
		if !ok || fr.Data != "" {
			t.Fatalf("the queued run's stream was not silent: %+v", fr)
		}
		if fr.Comment == "keep-alive" {
			heartbeats++
		}
	}
	p.Complete(f1.RunID, *f1.ThreadID)
	if got := typesOf(t, s1.rest()); got[len(got)-1] != "RUN_FINISHED" {
		t.Fatalf("first run %v", got)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f2.ThreadID)
	fs := events(s2.rest())
	if len(fs) != 5 || fs[0].event(t)["runId"] != f2.RunID {
		t.Fatalf("second run's stream %+v", fs)
	}
}

// Idempotency (D13): the same caller runId on the same thread, or the same
// Idempotency-Key, returns the original run's stream; nothing is inserted
// twice.
func TestIdempotentRetry(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	hdr := map[string]string{agui.IdempotencyHeader: "key-1"}
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("invented", "r1", ""), hdr)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	if n := len(events(s.rest())); n != 5 {
		t.Fatalf("first stream: %d events", n)
	}
	runs, threads := runCount(t, h), threadCount(t, h)

	// Same key (a retry of the first request, invented thread id and all).
	again := events(openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("invented", "r1", ""), hdr).rest())
	if len(again) != 5 || again[0].event(t)["runId"] != f.RunID {
		t.Fatalf("retry by key: %+v", again)
	}
	// A second turn on the thread, then its retry by caller runId.
	s2 := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f.ThreadID, "r2", ""), nil)
	f2 := p.Offer()
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f2.ThreadID)
	s2.rest()
	retry := events(openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f.ThreadID, "r2", ""), nil).rest())
	if len(retry) != 5 || retry[0].event(t)["runId"] != f2.RunID {
		t.Fatalf("retry by runId: %+v", retry)
	}
	if r, th := runCount(t, h), threadCount(t, h); r != runs+1 || th != threads {
		t.Fatalf("runs %d→%d, threads %d→%d: a retry inserted something", runs, r, threads, th)
	}
	p.None()
}

// Streams relay known event types without null members and unknown types
// untouched; a cancelled run's stream simply ends.
func TestRelayAndCancelledEnd(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q,"parentRunId":null,"timestamp":null}`, *f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"FUTURE_EVENT","x":null,"y":1}`)
	first, _ := s.nextEvent()
	second, _ := s.nextEvent()
	if strings.Contains(first.Data, "null") {
		t.Fatalf("known type relayed with nulls: %s", first.Data)
	}
	if second.Data != `{"type":"FUTURE_EVENT","x":null,"y":1}` {
		t.Fatalf("unknown type not relayed untouched: %s", second.Data)
	}
	if _, err := h.Store.RequestCancel(context.Background(), f.RunID, ""); err != nil {
		t.Fatal(err)
	}
	typ, _ := p.Next()
	if typ != "cancel" {
		t.Fatalf("provider got %s, want cancel", typ)
	}
	p.Finish(f.RunID)
	if rest := events(s.rest()); len(rest) != 0 {
		t.Fatalf("cancelled stream went on: %+v", rest)
	}
	h.WaitStatus(f.RunID, run.Cancelled)
}

// The stream budget (Lambda's deadline) ends a stream with a comment naming
// how to resume, never mid-event, then the CUSTOM funduq.stream_ended
// (no id) saying it to AG-UI clients, which skip comments.
func TestStreamBudget(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) { o.StreamBudget = 300 * time.Millisecond })

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	fs := s.rest()
	if len(fs) < 2 {
		t.Fatalf("frames %+v", fs)
	}
	hint, last := fs[len(fs)-2], fs[len(fs)-1]
	want := fmt.Sprintf("reconnect with GET /runs/%s/events and Last-Event-ID: 1", f.RunID)
	if !strings.Contains(hint.Comment, want) {
		t.Fatalf("frames %+v, want a comment containing %q before the last", fs, want)
	}
	wantLast := fmt.Sprintf(`{"type":"CUSTOM","name":"funduq.stream_ended","value":{"lastEventId":"1","reason":"stream_ended","resume":"GET /runs/%s/events","runId":"%s","threadId":"%s"}}`,
		f.RunID, f.RunID, *f.ThreadID)
	if last.ID != "" || last.Data != wantLast {
		t.Fatalf("last frame %+v, want %s without an id", last, wantLast)
	}
	if got := idsOf(fs); !slices.Equal(got, []string{"1", ""}) { // the stored event, then funduq.stream_ended
		t.Fatalf("ids %v", got)
	}
}

// A stream whose budget runs out before its run has sent anything still
// opens with a RUN_STARTED (AG-UI clients refuse a stream that opens with
// anything else) before the funduq.stream_ended naming Last-Event-ID 0.
func TestStreamBudgetBeforeAnyEvent(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) { o.StreamBudget = 300 * time.Millisecond })

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	evs := events(s.rest())
	if len(evs) != 2 || evs[0].ID != "" || evs[1].ID != "" ||
		evs[0].Data != fmt.Sprintf(`{"type":"RUN_STARTED","threadId":"%s","runId":"%s"}`, *f.ThreadID, f.RunID) ||
		!strings.Contains(evs[1].Data, `"name":"funduq.stream_ended","value":{"lastEventId":"0",`) {
		t.Fatalf("events %+v, want the synthesized RUN_STARTED, then funduq.stream_ended from 0", evs)
	}
}

// With Redis unreachable, streams fall back to polling PostgreSQL.
func TestStreamWithoutRedis(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	deps := mustDeps(t, h, "redis://127.0.0.1:1/0")
	srv := startDoorWith(t, deps, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	if got := idsOf(s.rest()); !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("ids %v", got)
	}
}

// GET /agents lists the agents with online.
func TestAgents(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo", "other")
	srv := startDoor(t, h, nil)
	code, _, body := jsonCall(t, "GET", srv.URL+"/agents", "", nil)
	as, _ := body["agents"].([]any)
	if code != 200 || len(as) != 2 {
		t.Fatalf("%d %v", code, body)
	}
	a := as[0].(map[string]any)
	pub, _ := identity.ParsePublicKey(p.Key)
	if a["providerKey"] != p.Key || a["fingerprint"] != identity.Fingerprint(pub) || a["name"] != "echo" || a["online"] != true {
		t.Fatalf("agent %v", a)
	}
	p.Close()
	h.Eventually("offline listed", func() bool {
		_, _, body := jsonCall(t, "GET", srv.URL+"/agents", "", nil)
		return body["agents"].([]any)[0].(map[string]any)["online"] == false
	})
}

// GET /agents hides an agent nobody has served for
// FUNDUQ_AGENTS_HIDDEN_AFTER (a week by default), as the reference's
// roster does (stale_hidden_window_seconds): a key's records stay after its
// link goes (a stranger's too, whose keys cost nothing), and were listed to
// every caller for ever. An agent served now is listed however long ago it
// registered, and one that left within the window is listed offline.
func TestAgentsNobodyServesLongAreHidden(t *testing.T) {
	h := nodetest.Start(t, nil)
	gone := h.Connect(0xe1, nil)
	gone.Register("left-long-ago")
	recent := h.Connect(0xe2, nil)
	recent.Register("left-yesterday")
	served := h.Connect(0xe3, nil)
	served.Register("served")
	gone.Close()
	recent.Close()
	srv := startDoor(t, h, nil)
	listed := func() map[string]bool {
		t.Helper()
		code, _, body := jsonCall(t, "GET", srv.URL+"/agents", "", nil)
		if code != 200 {
			t.Fatalf("GET /agents: %d %v", code, body)
		}
		out := map[string]bool{}
		for _, a := range body["agents"].([]any) {
			m := a.(map[string]any)
			out[m["name"].(string)] = m["online"].(bool)
		}
		return out
	}
	h.Eventually("both links' agents offline", func() bool {
		l := listed()
		return len(l) == 3 && !l["left-long-ago"] && !l["left-yesterday"] && l["served"]
	})
	// Time passes in the database's clock, where the records are kept.
	age := func(name, ago string) {
		t.Helper()
		if _, err := h.DB().Exec(context.Background(), `UPDATE agents SET last_seen_at = now() - $2::interval,
			unserved_since = CASE WHEN unserved_since IS NULL THEN NULL ELSE now() - $2::interval END WHERE name = $1`, name, ago); err != nil {
			t.Fatal(err)
		}
	}
	age("left-long-ago", "8 days")
	age("left-yesterday", "1 day")
	age("served", "30 days")
	if l := listed(); len(l) != 2 || l["left-yesterday"] || !l["served"] {
		t.Fatalf("listed %v; want left-yesterday offline and served online, left-long-ago hidden", l)
	}
}
