package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// These tests replay what the reference gateway's own Python provider SDK
// writes on wire v4 (docs/interop.md names the commit tried): each frame is
// the bytes its json.dumps produces — ", " and ": " separators, its key
// order, "maxConcurrentRuns": null when the author sets no limit, and no
// "seq" on events — and its behaviour: an agent that raises, or is
// cancelled, is ended with a bare finish (no terminal event); a process
// reconnects and registers its whole roster again after any closed link.

// refDial opens a link as the reference SDK does: POST /tickets, then a
// hello whose keys and spacing are its json.dumps, then the answer check.
// maxConc is the JSON of maxConcurrentRuns ("null" or a number).
func refDial(t *testing.T, h *nodetest.Harness, seed byte, maxConc string) *rawProv {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	key := s.PublicKeyHex()
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey": "`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ Ticket, FunduqPublicKey string }
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("tickets: %d", resp.StatusCode)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawProv{t: t, ws: ws, key: key, frames: make(chan rawFrame, 4096), pongs: make(chan string, 16), done: make(chan struct{}),
		stall: make(chan struct{}), quit: make(chan struct{})}
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	proof := s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))
	p.text(fmt.Sprintf(`{"type": "hello", "version": 4, "publicKey": %q, "ticket": %q, "nonce": %q, "maxConcurrentRuns": %s, "proof": %q}`,
		key, tr.Ticket, nonce, maxConc, proof))
	go func() {
		defer close(p.done)
		for {
			kind, b, err := ws.ReadMessage()
			if err != nil {
				p.err = err
				return
			}
			select {
			case p.frames <- rawFrame{kind, b}:
			case <-p.quit:
				return
			}
		}
	}()
	var w struct{ Type, FunduqPublicKey, Answer string }
	if err := json.Unmarshal(p.next().data, &w); err != nil || w.Type != "welcome" {
		t.Fatalf("welcome: %+v %v", w, err)
	}
	pub, _ := identity.ParsePublicKey(w.FunduqPublicKey)
	if err := identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		t.Fatalf("welcome answer: %v", err)
	}
	t.Cleanup(func() { close(p.quit); _ = ws.Close(); <-p.done })
	return p
}

// refRegister sends the reference SDK's register (its Registration model
// dumped by alias, every field) and reads exactly one frame, as it does:
// anything but registered there makes it drop the link and start again.
func (p *rawProv) refRegister(names ...string) {
	p.t.Helper()
	var regs []string
	for _, n := range names {
		regs = append(regs, fmt.Sprintf(`{"name": %q, "description": "reference SDK interop agent", "agentCardExtra": {}, "metadata": {}, "takesInterjections": false}`, n))
	}
	p.text(`{"type": "register", "agents": [` + strings.Join(regs, ", ") + `]}`)
	f := p.next()
	var m map[string]any
	if err := json.Unmarshal(f.data, &m); err != nil || m["type"] != wire.TypeRegistered {
		p.t.Fatalf("the reference SDK reads one frame after register and wants registered; got %s", f.data)
	}
}

func (p *rawProv) refAck(id string) {
	p.text(fmt.Sprintf(`{"type": "ack", "runId": %q, "accepted": true}`, id))
}

func (p *rawProv) refEvent(id, ev string) {
	p.text(fmt.Sprintf(`{"type": "event", "runId": %q, "event": %s}`, id, ev))
}

func (p *rawProv) refFinish(id string) {
	p.text(fmt.Sprintf(`{"type": "finish", "runId": %q}`, id))
}

func refStarted(thread, id string) string {
	return fmt.Sprintf(`{"type": "RUN_STARTED", "threadId": %q, "runId": %q}`, thread, id)
}

func refText(msg, delta string) []string {
	return []string{
		fmt.Sprintf(`{"type": "TEXT_MESSAGE_START", "messageId": %q, "role": "assistant"}`, msg),
		fmt.Sprintf(`{"type": "TEXT_MESSAGE_CONTENT", "messageId": %q, "delta": %q}`, msg, delta),
	}
}

func eventTypes(evs []map[string]any) []string {
	var out []string
	for _, e := range evs {
		s, _ := e["type"].(string)
		out = append(out, s)
	}
	return out
}

// A whole run in the reference SDK's bytes — a hello with
// "maxConcurrentRuns": null, its register, ack, events and finish — is
// taken: the run completes with every event stored once, in order, and
// nothing is counted.
func TestOutsideRefSDKRunInItsOwnBytes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := refDial(t, h, 0xa1, "null")
	p.refRegister("refagent")
	id, thread := p.startRun(h, "refagent")
	p.refAck(id)
	p.refEvent(id, refStarted(thread, id))
	for _, ev := range refText("m1", "ref sdk says: hi") {
		p.refEvent(id, ev)
	}
	p.refEvent(id, `{"type": "TEXT_MESSAGE_END", "messageId": "m1"}`)
	p.refEvent(id, fmt.Sprintf(`{"type": "RUN_FINISHED", "threadId": %q, "runId": %q}`, thread, id))
	p.refFinish(id)
	h.WaitStatus(id, run.Completed)
	got := strings.Join(eventTypes(h.Events(id)), ",")
	if want := "RUN_STARTED,TEXT_MESSAGE_START,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_END,RUN_FINISHED"; got != want {
		t.Fatalf("stored %s, want %s", got, want)
	}
	// Its thread_messages query: "limit": null, Python spacing.
	p.text(fmt.Sprintf(`{"type": "query", "queryId": "q1", "method": "thread_messages", "params": {"threadId": %q, "limit": null}}`, thread))
	var qr struct {
		QueryID string
		Result  []map[string]any
		Error   string
	}
	p.expect(wire.TypeQueryResult, &qr)
	if qr.QueryID != "q1" || qr.Error != "" || len(qr.Result) < 1 {
		t.Fatalf("thread_messages answered %+v", qr)
	}
	h.Settle()
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// The reference runtime ends a run whose agent raised with a bare finish:
// no RUN_ERROR, the exception only in the provider's log. The caller is
// told a typed failure (design.md §The status machine, rule 4) and the key
// is not counted.
func TestOutsideRefSDKAgentThatRaisesFailsTyped(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := refDial(t, h, 0xa2, "4")
	p.refRegister("refagent")
	id, thread := p.startRun(h, "refagent")
	p.refAck(id)
	p.refEvent(id, refStarted(thread, id))
	for _, ev := range refText("m1", "about to fail") {
		p.refEvent(id, ev)
	}
	p.refFinish(id)
	r := h.WaitStatus(id, run.Failed)
	evs := h.Events(id)
	last := evs[len(evs)-1]
	if last["type"] != "RUN_ERROR" || last["code"] != "provider_stream_ended_without_finishing" {
		t.Fatalf("run %+v ends with %v", r, last)
	}
	h.Settle()
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// The reference SDK complies with a cancel by cancelling the agent's task,
// then reports a bare finish: no RUN_ERROR, no RUN_FINISHED. The run is
// cancelled and its stream ends as the provider left it: funduq adds no
// terminal event for a cancel (design.md §The status machine, "A cancelled
// run's end": AG-UI has no cancel event, and the one who asked knows), and
// nothing is counted against the key.
func TestOutsideRefSDKCancelledRunEndsAsTheProviderLeftIt(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := refDial(t, h, 0xa3, "4")
	p.refRegister("refagent")
	id, thread := p.startRun(h, "refagent")
	p.refAck(id)
	p.refEvent(id, refStarted(thread, id))
	for _, ev := range refText("m1", "[0][1][2]") {
		p.refEvent(id, ev)
	}
	h.WaitStatus(id, run.Running)
	if _, err := h.Store.RequestCancel(t.Context(), id, ""); err != nil {
		t.Fatal(err)
	}
	p.expect(wire.TypeCancel, nil)
	p.refFinish(id)
	h.WaitStatus(id, run.Cancelled)
	got := strings.Join(eventTypes(h.Events(id)), ",")
	if want := "RUN_STARTED,TEXT_MESSAGE_START,TEXT_MESSAGE_CONTENT"; got != want {
		t.Fatalf("the cancelled run's stored stream is %s, want the provider's own %s", got, want)
	}
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// The link cut mid-run (no close frame): the reference SDK reconnects with a
// fresh ticket, hello and register, and writes the rest of the run's events
// (no seq) and its finish on the new link. The run is carried over within
// the link grace and completes, each event stored once; nothing is counted.
func TestOutsideRefSDKCutLinkCarriesTheRunOver(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.Waits.LinkGrace = 5 * time.Second }) // the default
	p1 := refDial(t, h, 0xa4, "4")
	p1.refRegister("refagent")
	id, thread := p1.startRun(h, "refagent")
	p1.refAck(id)
	p1.refEvent(id, refStarted(thread, id))
	for _, ev := range refText("m1", "[0]") {
		p1.refEvent(id, ev)
	}
	p1.barrier("b1")
	_ = p1.ws.UnderlyingConn().Close() // lost, not closed: no close frame
	<-p1.done

	p2 := refDial(t, h, 0xa4, "4")
	p2.refRegister("refagent")
	p2.refEvent(id, `{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "[1]"}`)
	p2.refEvent(id, `{"type": "TEXT_MESSAGE_END", "messageId": "m1"}`)
	p2.refEvent(id, fmt.Sprintf(`{"type": "RUN_FINISHED", "threadId": %q, "runId": %q}`, thread, id))
	p2.refFinish(id)
	h.WaitStatus(id, run.Completed)
	got := strings.Join(eventTypes(h.Events(id)), ",")
	if want := "RUN_STARTED,TEXT_MESSAGE_START,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_END,RUN_FINISHED"; got != want {
		t.Fatalf("stored %s, want %s", got, want)
	}
	h.Settle()
	if q := h.Quality(p2.key); charges(q) != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// Two processes of the reference SDK started with one key (a rolling
// deploy, or a process started twice). The newer link's register replaces
// the older; funduq closed the older as replaced, and the reference SDK
// reconnects after any closed link and registers its whole roster again,
// which replaced the newer: live, they took the agent from each other once
// a second for as long as both ran (docs/interop.md). The reference
// gateway leaves a replaced link open and idle. The user expects the two
// to settle with one serving: the older link is not closed by the newer's
// register, so the older process has nothing to reconnect for (design.md
// §Two processes of one key).
func TestOutsideRefSDKTwoProcessesOfOneKeySettle(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := refDial(t, h, 0xa5, "4")
	older.refRegister("refagent")
	newer := refDial(t, h, 0xa5, "4")
	newer.refRegister("refagent")
	// Runs go to the newer link.
	id, _ := newer.startRun(h, "refagent")
	newer.refAck(id)
	// The older link is still open: a query on it is answered. (The newer's
	// registered was written after the older was replaced, so this reads
	// after any close that replacement made.)
	_ = older.ws.WriteMessage(websocket.TextMessage, []byte(`{"type": "query", "queryId": "b1", "method": "raw.barrier", "params": {}}`))
	for {
		select {
		case f := <-older.frames:
			var m map[string]any
			_ = json.Unmarshal(f.data, &m)
			if m["type"] == wire.TypeQueryResult && m["queryId"] == "b1" {
				return
			}
			t.Logf("older link told %s", f.data)
		case <-older.done:
			t.Fatalf("the older link was closed (%v): the reference SDK reconnects and registers, taking the agent back from the newer", older.err)
		case <-time.After(time.Minute):
			t.Fatal("no answer on the older link")
		}
	}
}

// The newer of two reference-SDK processes of one key stops (its process
// closes its link): the older, replaced and idle on its open link, must
// not leave the agent unserved for as long as it runs. funduq closes its
// link as the agent goes unserved; the reference SDK reconnects after any
// closed link and registers, and serves the agent again.
func TestOutsideRefSDKOlderProcessServesAgainWhenTheNewerStops(t *testing.T) {
	h := nodetest.Start(t, nil)
	older := refDial(t, h, 0xa8, "4")
	older.refRegister("refagent")
	newer := refDial(t, h, 0xa8, "4")
	newer.refRegister("refagent")
	_ = newer.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	<-newer.done
	select {
	case <-older.done:
	case <-time.After(time.Minute):
		t.Fatal("the older link is still open with the agent served by no link")
	}
	back := refDial(t, h, 0xa8, "4") // the older process, reconnected
	back.refRegister("refagent")
	id, thread := back.startRun(h, "refagent")
	back.refAck(id)
	back.refEvent(id, refStarted(thread, id))
	back.refEvent(id, fmt.Sprintf(`{"type": "RUN_FINISHED", "threadId": %q, "runId": %q}`, thread, id))
	back.refFinish(id)
	h.WaitStatus(id, run.Completed)
}

// After a reconnect the reference SDK reads exactly one frame after its
// register and wants registered; a run of its key held from the lost link
// with a cancel pending must not be told before that, or the SDK drops the
// new link too and the run waits out the grace.
func TestOutsideRefSDKRegisteredIsTheFirstAnswerAfterAReconnect(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.Waits.LinkGrace = 5 * time.Second }) // the default
	p1 := refDial(t, h, 0xa6, "4")
	p1.refRegister("refagent")
	id, thread := p1.startRun(h, "refagent")
	p1.refAck(id)
	p1.refEvent(id, refStarted(thread, id))
	h.WaitStatus(id, run.Running)
	if _, err := h.Store.RequestCancel(t.Context(), id, ""); err != nil {
		t.Fatal(err)
	}
	p1.expect(wire.TypeCancel, nil)
	_ = p1.ws.UnderlyingConn().Close()
	<-p1.done

	p2 := refDial(t, h, 0xa6, "4")
	p2.refRegister("refagent") // fails the test unless registered comes first
	p2.refFinish(id)
	h.WaitStatus(id, run.Cancelled)
}

// A key withdrawn at the quality tolerance (design.md D6) is told so on
// each open link with an error frame that says to reconnect, and the link
// is left open. The reference SDK reads an error frame as a warning to log
// and nothing more, so it stays on that link serving nothing for as long
// as the process runs: live, three restarts of its process mid-run (each
// run abandoned, the SDK having no resend) left its agent agent_offline
// with the process up and only a WARNING in its log (docs/interop.md). The
// user expects the withdrawn link to be closed, so that a provider that
// reconnects after any closed link does what the message asks.
func TestOutsideRefSDKWithdrawnLinkIsClosed(t *testing.T) {
	h := nodetest.Start(t, nil)
	stay := refDial(t, h, 0xa7, "4")
	stay.refRegister("other")
	for i := range h.Cfg.Waits.ProviderQualityTolerance {
		p := refDial(t, h, 0xa7, "4")
		p.refRegister("refagent")
		id, thread := p.startRun(h, "refagent")
		p.refAck(id)
		p.refEvent(id, refStarted(thread, id))
		h.WaitStatus(id, run.Running)
		_ = p.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		<-p.done
		if r := h.WaitStatus(id, run.Failed); r.Status != run.Failed {
			t.Fatalf("run %d: %s", i, r.Status)
		}
	}
	var e wire.Error
	stay.expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "withdrawn") {
		t.Fatalf("told %q", e.Message)
	}
	_ = stay.ws.WriteMessage(websocket.TextMessage, []byte(`{"type": "query", "queryId": "b1", "method": "raw.barrier", "params": {}}`))
	for {
		// The reference SDK logs the error frame and stays on the link,
		// serving nothing: funduq closes it (a minute is the guard).
		select {
		case f := <-stay.frames:
			var m map[string]any
			_ = json.Unmarshal(f.data, &m)
			// A query read between the notice and the close may be
			// answered: what the user needs is the close that follows.
			t.Logf("the withdrawn link was told %s before its close", f.data)
		case <-stay.done:
			var ce *websocket.CloseError
			if !errors.As(stay.err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "withdrawn") {
				t.Fatalf("the withdrawn link ended with %v, want close 1008 saying withdrawn", stay.err)
			}
			return
		case <-time.After(time.Minute):
			t.Fatal("no answer on the withdrawn link")
		}
	}
}
