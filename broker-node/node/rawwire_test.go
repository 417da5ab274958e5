package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// rawProv is a provider written against the wire alone (design.md §The
// provider wire, the spec's seeds), with gorilla/websocket and no code of
// funduq's SDK or of nodetest's provider: what it sends is the bytes the
// test writes, in the WebSocket framing the test chooses.
type rawProv struct {
	t      *testing.T
	ws     *websocket.Conn
	key    string
	frames chan rawFrame
	pongs  chan string
	done   chan struct{}
	err    error // the read's end, once done is closed
}

type rawFrame struct {
	kind int
	data []byte
}

// rawDial takes a ticket, opens /ws/provider with d, says hello with the
// key of seed and checks welcome's answer.
func rawDial(t *testing.T, h *nodetest.Harness, seed byte, d *websocket.Dialer) *rawProv {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	key := s.PublicKeyHex()
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ Ticket, FunduqPublicKey string }
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("tickets: %d", resp.StatusCode)
	}
	if d == nil {
		d = websocket.DefaultDialer
	}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawProv{t: t, ws: ws, key: key, frames: make(chan rawFrame, 4096), pongs: make(chan string, 16), done: make(chan struct{})}
	ws.SetPongHandler(func(s string) error { p.pongs <- s; return nil })
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	proof := s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))
	p.text(fmt.Sprintf(`{"type":"hello","version":4,"publicKey":%q,"ticket":%q,"nonce":%q,"proof":%q}`, key, tr.Ticket, nonce, proof))
	go func() {
		defer close(p.done)
		for {
			kind, b, err := ws.ReadMessage()
			if err != nil {
				p.err = err
				return
			}
			p.frames <- rawFrame{kind, b}
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
	t.Cleanup(func() { _ = ws.Close(); <-p.done })
	return p
}

func (p *rawProv) text(s string) {
	p.t.Helper()
	if err := p.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

func (p *rawProv) next() rawFrame {
	p.t.Helper()
	select {
	case f := <-p.frames:
		return f
	case <-p.done:
		select {
		case f := <-p.frames:
			return f
		default:
		}
		p.t.Fatalf("link closed while waiting for a frame: %v", p.err)
	case <-time.After(time.Minute):
		p.t.Fatal("no frame arrived")
	}
	return rawFrame{}
}

// expect reads the next frame, which must be of type typ, into v.
func (p *rawProv) expect(typ string, v any) map[string]any {
	p.t.Helper()
	f := p.next()
	var m map[string]any
	if err := json.Unmarshal(f.data, &m); err != nil || m["type"] != typ {
		p.t.Fatalf("frame %s, want %s", f.data, typ)
	}
	if v != nil {
		_ = json.Unmarshal(f.data, v)
	}
	return m
}

// barrier sends a query of a method funduq does not know and returns the
// frames that came before its answer: everything funduq wrote before it
// read the query.
func (p *rawProv) barrier(id string) []map[string]any {
	p.t.Helper()
	p.text(`{"type":"query","queryId":"` + id + `","method":"raw.barrier","params":{}}`)
	var before []map[string]any
	for {
		f := p.next()
		var m map[string]any
		_ = json.Unmarshal(f.data, &m)
		if m["type"] == wire.TypeQueryResult && m["queryId"] == id {
			return before
		}
		before = append(before, m)
	}
}

func (p *rawProv) register(names ...string) {
	p.t.Helper()
	var regs []string
	for _, n := range names {
		regs = append(regs, fmt.Sprintf(`{"name":%q,"description":"raw"}`, n))
	}
	p.text(`{"type":"register","agents":[` + strings.Join(regs, ",") + `]}`)
	p.expect(wire.TypeRegistered, nil)
}

func (p *rawProv) offer() string {
	p.t.Helper()
	var r struct{ RunID string }
	p.expect(wire.TypeRun, &r)
	return r.RunID
}

// A name or thread id holding a NUL can never have been stored (PostgreSQL
// text holds no NUL), so the answer is the one for a name never registered
// or a thread that is not the provider's. It used to reach PostgreSQL,
// which refused the data, and the provider was told funduq could not do it
// "right now": a deleteAgent's "try again", a query's ask-again text, which
// our SDK reports as provider.ErrQueryAskAgain — to be asked again for good.
func TestRawUnstorableNamesAreAnsweredAsUnknown(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x72, nil)
	p.register("echo")
	var e struct{ Message, Name string }
	p.text(`{"type":"deleteAgent","name":"echo\u0000"}`)
	p.expect(wire.TypeError, &e)
	if e.Message != `agent "echo\x00" is not registered` || e.Name != "echo\x00" {
		t.Errorf("deleteAgent of a name with a NUL answered %+v; want it not registered", e)
	}
	var q wire.QueryResult
	p.text(`{"type":"query","queryId":"q1","method":"thread_messages","params":{"threadId":"thr\u0000"}}`)
	p.expect(wire.TypeQueryResult, &q)
	if q.QueryID != "q1" || q.Error != "no such thread for this provider" {
		t.Errorf("thread_messages of a thread id with a NUL answered %+v; want no such thread", q)
	}
	// The agent is still served: the refusal changed nothing.
	id, _ := h.Door(p.key, "echo", "", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
}

// A provider's seq is an integer (design.md D7, an extension of funduq's):
// one written with a fraction or an exponent, 1.0 or 1e0, is refused naming
// the run and saying so — not "out of range", which it is not — and the run
// goes on. Any integer bigint holds is a seq, matched exactly: 2^53 and
// 2^53+1, one apart where a float64 would make them one, are two events.
func TestRawSeqShapes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x73, nil)
	p.register("echo")
	id, thread := h.Door(p.key, "echo", "", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	for _, seq := range []string{"1.0", "1e0", "1.5", "-1e3"} {
		p.text(`{"type":"event","runId":"` + id + `","seq":` + seq + `,"event":{"type":"STEP_STARTED","stepName":"s"}}`)
		var e struct{ Message, RunID string }
		p.expect(wire.TypeError, &e)
		if e.RunID != id || !strings.Contains(e.Message, "seq must be an integer written without a fraction or exponent") {
			t.Errorf("seq %s answered %+v; want a refusal naming the run that says seq must be an integer", seq, e)
		}
	}
	p.text(`{"type":"event","runId":"` + id + `","seq":9223372036854775808,"event":{"type":"STEP_STARTED","stepName":"s"}}`)
	var e struct{ Message, RunID string }
	p.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "seq is out of range") {
		t.Errorf("seq 2^63 answered %+v; want out of range", e)
	}
	for i, seq := range []string{"-1", "0", "9007199254740992", "9007199254740993", "9223372036854775807"} {
		p.text(fmt.Sprintf(`{"type":"event","runId":%q,"seq":%s,"event":{"type":"STEP_STARTED","stepName":"s%d"}}`, id, seq, i))
	}
	// One resent as it was: stored once, answered nothing.
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"seq":9007199254740992,"event":{"type":"STEP_STARTED","stepName":"s2"}}`, id))
	if got := p.barrier("b1"); len(got) != 0 {
		t.Fatalf("integer seqs answered %v", got)
	}
	steps := 0
	for _, e := range h.Events(id) {
		if e["type"] == "STEP_STARTED" {
			steps++
		}
	}
	if steps != 5 {
		t.Errorf("stored %d STEP_STARTED events, want 5 (each integer seq once)", steps)
	}
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(`{"type":"finish","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Completed)
}

// A refusal is recorded verbatim (TestRefusalRecordsReasonVerbatim), so one
// whose reason holds a NUL, which PostgreSQL's text cannot, is refused
// naming the run and saying why, and the offer stays out for the
// provider's next answer. It used to fail the run as "provider sent a
// malformed AG-UI event" — the provider sent no event, and the caller was
// told "the provider sent an AG-UI event that does not validate" — with
// nothing said to the provider (D15).
func TestRawRefusalReasonWithANULIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x74, nil)
	p.register("echo")
	id, _ := h.Door(p.key, "echo", "", "hi")
	if got := p.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	p.text(`{"type":"ack","runId":"` + id + `","accepted":false,"reason":"no\u0000pe"}`)
	var e struct{ Message, RunID string }
	p.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "NUL") {
		t.Fatalf("a refusal whose reason holds a NUL answered %+v; want it refused naming the run and the NUL", e)
	}
	p.text(`{"type":"ack","runId":"` + id + `","accepted":false,"reason":"nope"}`)
	if r := h.WaitStatus(id, run.Failed); r.FailureReason != "nope" {
		t.Errorf("the run failed %q, want the provider's reason", r.FailureReason)
	}
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}
